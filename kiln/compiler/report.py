"""What a build did, for `kiln compile` and the build's progress lines: stages timed, libraries compiled or cached."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kiln.codegen.build_profile import BuildProfile, UnitBuild
from kiln.codegen.cache import CompileCache, cache_key, split_units
from kiln.codegen.compiler import FLAGS
from kiln.target import compiler_identity, find_compiler


@dataclass
class BuildReport:
    """What a build did: (stage, seconds, detail) in order, and how the library was obtained."""

    stages: list[tuple[str, float, str]] = field(default_factory=list)
    kernels: int = 0
    compiled: int = 0  # libraries gcc built
    cached: int = 0  # libraries the compile cache already had
    weights_bytes: int | None = None  # the model's weights as imported, before any pass re-laid them out
    profile: BuildProfile = field(default_factory=BuildProfile)  # finer: per stage, unit and kernel

    def add(self, stage: str, seconds: float, detail: str, progress: Callable[[str], None] | None) -> None:
        self.stages.append((stage, seconds, detail))
        if progress is not None:
            progress(f"{stage:8s} {seconds * 1e3:9.1f} ms  {detail}")


class CountingCache(CompileCache):
    """The compile cache, noting for the report whether each library was a hit and how long gcc took, each
    translation unit in `profile`, and the functions compiled so far to `kernel_progress` (done, total)."""

    def __init__(self, profile: BuildProfile | None = None,
                 kernel_progress: Callable[[int, int], None] | None = None):
        super().__init__(on_unit=self._unit)
        self.hits, self.misses, self.seconds = 0, 0, 0.0
        self.profile = profile if profile is not None else BuildProfile()
        self._kernel_progress = kernel_progress
        self._lock = threading.Lock()  # units finish on the compile threads
        self._done, self._total = 0, 0

    def _unit(self, unit: UnitBuild) -> None:
        with self._lock:
            self.profile.note_unit(unit)
            self._done += len(unit.functions)
            done, total = self._done, self._total
        if self._kernel_progress is not None and unit.stage == "compile":
            self._kernel_progress(done, total)

    def build(self, source: str, cc: str = "gcc", flags: tuple[str, ...] = FLAGS) -> Path:
        with self._lock:
            self._total += len(split_units(source)[1])
        _, lib = self.paths(cache_key(source, flags, compiler_identity(find_compiler(cc))))
        hit = lib.exists()
        t0 = time.perf_counter()
        path = super().build(source, cc, flags)
        self.seconds += time.perf_counter() - t0
        self.hits, self.misses = self.hits + hit, self.misses + (not hit)
        return path
