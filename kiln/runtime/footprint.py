"""A compiled model's footprint: its weights as imported and as the kernels read them, the arena, the
code, and the process's resident memory after load and after a run (`kiln show DIR`, the build's report)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from kiln.ir.expr import Constant
from kiln.ir.visitor import post_order
from kiln.runtime.aot_executor import AotExecutor

if TYPE_CHECKING:
    from kiln.runtime.executor import GraphExecutor

_MB = 1 << 20


@dataclass(frozen=True)
class Footprint:
    weights_bytes: int | None  # the model's weights as imported (None: not recorded, an older build)
    packed_weights_bytes: int  # the arrays the kernels read (packed, re-laid-out, folded)
    arena_bytes: int  # the AOT arena of intermediates (0 for the graph executor, which allocates per run)
    code_bytes: int  # the kernels' library on disk
    rss_after_load: int | None  # the process's resident bytes after the build or load (None without /proc)
    rss_after_run: int | None = None  # ... and after one run, when one was made

    def lines(self) -> list[str]:
        """One line per quantity, for `kiln show DIR`."""
        return [f"{what + ':':21s} {_mb(n)}" for what, n in self._items()]

    def __str__(self) -> str:
        """One line, for the build's report."""
        return ", ".join(f"{what} {_mb(n)}" for what, n in self._items()
                         if not (what == "resident after a run" and n is None))

    def _items(self) -> list[tuple[str, int | None]]:
        return [("weights", self.weights_bytes), ("packed weights", self.packed_weights_bytes),
                ("arena", self.arena_bytes), ("code", self.code_bytes),
                ("resident after load", self.rss_after_load), ("resident after a run", self.rss_after_run)]


def _mb(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{n / _MB:.1f} MB" if n >= _MB else f"{n:,} B"


def kernel_weights(runner: AotExecutor | GraphExecutor) -> list[np.ndarray]:
    """The distinct arrays the runner's kernels read its weights from: the AOT entry's, or the graph
    executor's kernels' own constants and the IR's (which it passes to the fused calls)."""
    if isinstance(runner, AotExecutor):
        arrays = runner.weights
    else:
        arrays = [c for k in runner.kernels.values() for c in k.constants]
        arrays += [e.data for f in runner.mod.functions.values() for e in post_order(f) if isinstance(e, Constant)]
    return list({id(a): a for a in arrays}.values())


def arena_bytes(runner: AotExecutor | GraphExecutor) -> int:
    return runner.arena_bytes if isinstance(runner, AotExecutor) else 0


def code_bytes(library: Any) -> int:
    """The size of the loaded library's file (0 without one: a model with no kernels)."""
    return os.path.getsize(library.path) if library is not None else 0
