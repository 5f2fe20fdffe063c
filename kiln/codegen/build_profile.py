"""Where a build's time goes: seconds per stage and per translation unit, and C bytes per kernel.

`kiln compile --profile` prints it, the build report holds it (`BuildReport.profile`), an exported model
saves it and `kiln show DIR` prints it again. gcc compiles several kernels in one translation unit, so a
kernel's gcc seconds are its unit's shared out by the cost model the unit planner uses (bytes^1.5,
kiln.codegen.cache): an estimate, marked as one.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class UnitBuild:
    """One translation unit of a library build (or its link): the functions in it with their C bytes,
    the bytes of the shared prelude it parses, and gcc's wall seconds (0 when the compile cache had it)."""

    stage: str  # "compile", "link" or "pch"
    functions: tuple[tuple[str, int], ...]
    prelude_bytes: int
    seconds: float
    cached: bool


# compile: gcc seconds summed over the units (which run in parallel); link: the link of a split build; pch: the
# runtime header precompiled (once per compiler and flags);
# gcc_wall: the wall seconds of the whole library from the compile cache (units and link)
STAGES = ("import", "passes", "lower", "plan", "codegen", "pch", "compile", "link", "gcc_wall")
TOP_KERNELS = 10  # kernels `lines` lists, by estimated gcc seconds


@dataclass
class BuildProfile:
    """Seconds per stage (STAGES) and every translation unit a build compiled or took from the cache."""

    stages: dict[str, float] = field(default_factory=dict)
    units: list[UnitBuild] = field(default_factory=list)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the block as (part of) stage `name`."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t0)

    def add(self, name: str, seconds: float) -> None:
        self.stages[name] = self.stages.get(name, 0.0) + seconds

    def note_unit(self, unit: UnitBuild) -> None:
        """The compile cache's on_unit: a unit compiled (or found), or a link."""
        self.units.append(unit)
        self.add(unit.stage, unit.seconds)

    def kernels(self) -> list[tuple[str, int, float]]:
        """(function, C bytes, estimated gcc seconds) of every function compiled, most seconds first."""
        rows = []
        for u in self.units:
            weight = sum(b ** 1.5 for _, b in u.functions) or 1.0
            rows += [(name, b, u.seconds * b ** 1.5 / weight) for name, b in u.functions]
        return sorted(rows, key=lambda r: (-r[2], -r[1], r[0]))

    def lines(self) -> list[str]:
        """The profile as text: stages, then units, then the kernels gcc spent most on."""
        out = ["stage        seconds"]
        out += [f"  {s:10s} {self.stages[s]:8.3f}" for s in STAGES if s in self.stages]
        compiled = [u for u in self.units if u.stage == "compile"]
        if compiled:
            out.append(f"translation units: {len(compiled)} ({sum(u.cached for u in compiled)} from the cache)")
            for i, u in enumerate(compiled):
                size = sum(b for _, b in u.functions)
                how = "cached" if u.cached else f"{u.seconds:7.3f} s"
                out.append(f"  unit {i:3d}: {len(u.functions):4d} functions, {size:9,d} C bytes "
                           f"(+{u.prelude_bytes:,d} prelude), {how}")
        kernels = self.kernels()
        if kernels:
            out.append(f"kernels by gcc seconds (estimated: a unit's time shared by bytes^1.5; top {TOP_KERNELS} "
                       f"of {len(kernels)})")
            out += [f"  {name:48s} {b:9,d} C bytes {s:7.3f} s" for name, b, s in kernels[:TOP_KERNELS]]
        return out

    def to_json(self) -> dict[str, Any]:
        return {"stages": dict(self.stages), "units": [asdict(u) for u in self.units]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BuildProfile:
        units = [UnitBuild(u["stage"], tuple((n, b) for n, b in u["functions"]), u["prelude_bytes"], u["seconds"],
                           u["cached"]) for u in data.get("units", [])]
        return cls(dict(data.get("stages", {})), units)
