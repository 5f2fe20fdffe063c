"""A content-addressed on-disk cache of compiled modules.

Key: sha256 of the source, the flags and the compiler's identity. The target (kiln.Target) enters
through both: its ISA through the flags (Target.compiler_flags), what else it decides (vector width,
cores, caches) through the source its schedules made; the same C for the same flags is the same library.
Every file appears atomically (written under a unique temporary name, then os.replace), so processes
building the same module at once all end up loading one complete library; a hit runs no compiler at all.

A module whose functions are marked as units (kiln.codegen.c_source.UNIT_MARK) compiles as several
translation units in parallel, one gcc per CPU, then links: each unit is the shared prelude plus a
deterministic, size-balanced share of the functions, cached as an object under its own key, so the
library's key and the objects' keys are stable. The library is the same code either way.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kiln.codegen.build_profile import UnitBuild
from kiln.codegen.c_source import RUNTIME_HEADER, UNIT_MARK
from kiln.codegen.compiler import (
    FLAGS,
    compile_header,
    compile_object,
    compile_shared,
    link_shared,
    object_flags,
)
from kiln.target import compiler_identity, find_compiler, host_cores

# in a unit of a split build the typed bodies are visible to the other units, never outside the library
SPLIT_LINKAGE = '#define KILN_BODY __attribute__((visibility("hidden")))\n'


_FUNCTION = re.compile(r"int32_t (kiln_\w+)\(")


def unit_functions(units: list[str]) -> tuple[tuple[str, int], ...]:
    """(first function defined, C bytes) of each function's part of a module."""
    return tuple(((m.group(1) if (m := _FUNCTION.search(u)) else "?"), len(u)) for u in units)


def default_cache_dir() -> Path:
    return Path(os.environ.get("KILN_CACHE_DIR") or Path.home() / ".cache" / "kiln")


def default_jobs() -> int:
    """How many compilers run at once: the CPUs this process may use that are idle (this process, about
    to wait for gcc, counts as idle). A split build costs ~10% more CPU in all (each unit parses the
    prelude), which only pays off where CPUs are free; the library is the same either way."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = host_cores()
    try:
        busy = os.getloadavg()[0] - 1
    except OSError:
        busy = 0.0
    return max(1, min(cpus, round(cpus - busy)))


def cache_key(source: str, flags: tuple[str, ...], identity: str) -> str:
    h = hashlib.sha256()
    for part in (source, "\0".join(flags), identity):
        data = part.encode()
        h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


def split_units(source: str) -> tuple[str, list[str]]:
    """(prelude, the functions' parts) of a generated module; no parts when it is not marked."""
    prelude, *units = source.split(f"\n{UNIT_MARK}\n")
    return prelude, units


def plan_chunks(sizes: list[float], jobs: int) -> list[list[int]]:
    """Unit indices grouped into at most `jobs` chunks of similar total size (the estimated compile
    cost: largest first onto the lightest chunk, ties to the lower index), each in source order:
    deterministic for given sizes."""
    chunks: list[list[int]] = [[] for _ in range(max(1, min(jobs, len(sizes))))]
    load = [0.0] * len(chunks)
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        k = min(range(len(chunks)), key=lambda k: (load[k], k))
        chunks[k].append(i)
        load[k] += sizes[i]
    return [sorted(c) for c in chunks if c]


class CompileCache:
    def __init__(self, root: Path | str | None = None, jobs: int | None = None,
                 on_unit: Callable[[UnitBuild], None] | None = None):
        """`on_unit` hears of each translation unit compiled (or found) and each link, as it finishes."""
        self.root = Path(root) if root is not None else default_cache_dir()
        self.jobs = jobs or default_jobs()
        self.on_unit = on_unit

    def _note(self, stage: str, functions: tuple[tuple[str, int], ...], prelude: int, seconds: float,
              cached: bool) -> None:
        if self.on_unit is not None:
            self.on_unit(UnitBuild(stage, functions, prelude, seconds, cached))

    def paths(self, key: str) -> tuple[Path, Path]:
        """(source, library) paths of a key."""
        d = self.root / key[:2]
        return d / f"{key}.c", d / f"{key}.so"

    def build(self, source: str, cc: str = "gcc", flags: tuple[str, ...] = FLAGS) -> Path:
        """The library compiled from `source`, from the cache or freshly built into it."""
        cc_path = find_compiler(cc)
        identity = compiler_identity(cc_path)
        src, lib = self.paths(cache_key(source, flags, identity))
        prelude, units = split_units(source)
        if lib.exists():
            self._note("compile", unit_functions(units), len(prelude), 0.0, True)
            return lib
        lib.parent.mkdir(parents=True, exist_ok=True)
        if self.jobs > 1 and len(units) > 1:
            objects = self._objects(prelude, units, cc_path, flags, identity)
            t0 = time.perf_counter()
            _atomic_output(lib, lambda tmp: link_shared(objects, tmp, cc_path, flags))
            self._note("link", (), 0, time.perf_counter() - t0, False)
            return lib
        atomic_write(src, self._precompiled(source, cc_path, flags, identity).encode())  # the header it includes too
        t0 = time.perf_counter()
        _atomic_output(lib, lambda tmp: compile_shared(src, tmp, cc_path, flags))
        self._note("compile", unit_functions(units), len(prelude), time.perf_counter() - t0, False)
        return lib

    def _objects(self, prelude: str, units: list[str], cc_path: str, flags: tuple[str, ...],
                 identity: str) -> list[Path]:
        """One object per chunk of units, compiled in parallel where the cache lacks it."""
        # NOTE: gcc's time grows faster than a function's size (about size^1.5 on our kernels): one big
        # unrolled kernel outweighs several small ones
        weights = [len(u) ** 1.5 for u in units]
        chunks = plan_chunks(weights, self.jobs)
        named = unit_functions(units)
        oflags = object_flags(flags)
        objects = []
        for chunk in chunks:
            text = self._precompiled(prelude + "\n" + "\n".join(units[i] for i in chunk), cc_path, flags, identity,
                                     SPLIT_LINKAGE)
            src, lib = self.paths(cache_key(text, oflags, identity))
            objects.append((text, src, lib.with_suffix(".o"), tuple(named[i] for i in chunk)))
        todo = [o for o in objects if not o[2].exists()]
        for o in objects:
            if o not in todo:
                self._note("compile", o[3], len(prelude), 0.0, True)

        def compile_one(item: tuple[str, Path, Path, tuple[tuple[str, int], ...]]) -> None:
            text, src, obj, functions = item
            obj.parent.mkdir(parents=True, exist_ok=True)
            if not src.exists():
                atomic_write(src, text.encode())
            t0 = time.perf_counter()
            _atomic_output(obj, lambda tmp: compile_object(src, tmp, cc_path, flags))
            self._note("compile", functions, len(prelude), time.perf_counter() - t0, False)

        if todo:
            with ThreadPoolExecutor(max_workers=min(self.jobs, len(todo))) as pool:
                for _ in pool.map(compile_one, todo):  # re-raises the first CompileError
                    pass
        return [obj for _, _, obj, _ in objects]


    def _precompiled(self, text: str, cc_path: str, flags: tuple[str, ...], identity: str, after: str = "") -> str:
        """`text` to compile: its leading copy of the runtime header (kiln_runtime.h) replaced by an #include
        of the header precompiled for these flags, where gcc builds one (once per compiler and flags, into
        the cache). The header's system includes (immintrin.h above all) are most of a small unit's
        compile time, paid by every unit of every build without it. `after` goes right after the header."""
        header = RUNTIME_HEADER.read_text()
        if not text.startswith(header):
            return after + text
        key = cache_key(header, object_flags(flags), identity)
        h = self.root / "pch" / key[:2] / key / RUNTIME_HEADER.name
        gch = h.with_name(h.name + ".gch")
        if not gch.exists():
            h.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(h, header.encode())
            t0 = time.perf_counter()
            _atomic_output(gch, lambda tmp: compile_header(h, tmp, cc_path, flags))
            self._note("pch", (), len(header), time.perf_counter() - t0, False)
        return f'#include "{h}"\n{after}{text[len(header):]}'


def _atomic_output(path: Path, make: Callable[[Path], None]) -> None:
    """Run `make(tmp)` on a unique temporary name next to `path`, then rename it into place."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem[:16]}.", suffix=f"{path.suffix}.tmp", dir=path.parent)
    os.close(fd)
    try:
        make(Path(tmp))
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem[:16]}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
