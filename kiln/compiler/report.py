"""What a build did, for `kiln compile` and the build's progress lines: stages timed, libraries compiled or cached."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kiln.codegen.cache import CompileCache, cache_key
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

    def add(self, stage: str, seconds: float, detail: str, progress: Callable[[str], None] | None) -> None:
        self.stages.append((stage, seconds, detail))
        if progress is not None:
            progress(f"{stage:8s} {seconds * 1e3:9.1f} ms  {detail}")


class CountingCache(CompileCache):
    """The compile cache, noting for the report whether each library was a hit and how long gcc took."""

    def __init__(self):
        super().__init__()
        self.hits, self.misses, self.seconds = 0, 0, 0.0

    def build(self, source: str, cc: str = "gcc", flags: tuple[str, ...] = FLAGS) -> Path:
        _, lib = self.paths(cache_key(source, flags, compiler_identity(find_compiler(cc))))
        hit = lib.exists()
        t0 = time.perf_counter()
        path = super().build(source, cc, flags)
        self.seconds += time.perf_counter() - t0
        self.hits, self.misses = self.hits + hit, self.misses + (not hit)
        return path
