"""The AOT executor: a static-shape model compiled into one C entry function, run by one ctypes call.

kiln.compiler.aot builds it (fused groups, a memory plan, `kiln_model_run` in the kernels' library);
kiln.runtime.artifact loads it again. No Python runs between kernels. Every run in flight takes an
arena of its own from the executor's ArenaPool, so runs from several threads overlap (ctypes releases
the GIL during the call) and no lock is held while kernels run. `start(feeds)` is a run that can be
cancelled and resumed (kiln.runtime.run_handle).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

import numpy as np

from kiln.codegen.aot_abi import ENTRY, FAILED_CALL, PROFILE_ENTRY, RUN_FROM_ENTRY
from kiln.errors import ArtifactError, InputError, KernelError, KilnError
from kiln.ir.aligned import aligned
from kiln.ir.dtype import to_numpy
from kiln.ir.input_check import check_input
from kiln.ir.module import IRModule
from kiln.ir.sizes import check_alloc
from kiln.ir.types import TensorType
from kiln.runtime.arena_pool import ArenaPool, RunSlot
from kiln.runtime.run_handle import PreemptibleRun, RunControl
from kiln.runtime.thread_pool import running

STRATEGIES = ("arena", "counted")  # how a build lays out its intermediates (kiln.build's memory_strategy)


def check_strategy(strategy: str) -> None:
    if strategy not in STRATEGIES:
        raise KilnError(f"memory strategy {strategy!r} is not one of {', '.join(STRATEGIES)}")


@dataclass(frozen=True)
class MemoryReport:
    arena_bytes: int
    lower_bound: int  # the live-bytes peak of the order run: no arena for it can be smaller
    naive_bytes: int  # every intermediate in its own buffer
    order: tuple[str, ...]  # kernels in execution order
    weight_bytes: int
    output_bytes: int
    strategy: str = "arena"  # "arena" (planned offsets) or "counted" (pool allocation at run time)
    topological_peak: int = 0  # the live-bytes peak of the order the graph was written in
    search_peak: int = 0  # the lowest peak the order search found
    search_exact: bool = False  # whether the search proved it the minimum over all orders
    search_seconds: float = 0.0

    def __str__(self) -> str:
        ratio = self.arena_bytes / self.lower_bound if self.lower_bound else 1.0
        text = (f"{self.strategy}: arena {self.arena_bytes} B (lower bound {self.lower_bound} B, x{ratio:.2f}; naive "
                f"{self.naive_bytes} B); weights {self.weight_bytes} B; outputs {self.output_bytes} B; "
                f"{len(self.order)} kernels")
        if self.search_peak:
            gain = self.topological_peak / self.search_peak
            kind = "minimum" if self.search_exact else "best found"
            text += (f"; order peak {self.search_peak} B ({kind}, {self.search_seconds:.2f} s; topological order "
                     f"{self.topological_peak} B, x{gain:.2f})")
        return text


class AotExecutor:
    """A compiled model: `run(feeds)` is one call into `kiln_model_run` over an arena of the pool."""

    def __init__(self, mod: IRModule, weights: list[np.ndarray], outputs: list[tuple[tuple[int, ...], np.dtype]],
                 arena_bytes: int, library: Any, report: MemoryReport, calls: tuple[str, ...] = ()):
        self.mod, self.library, self.arena_bytes = mod, library, arena_bytes
        self._params = [(p.name, p.type) for p in mod.input_vars]
        self._outputs = outputs
        for i, (shape, dtype) in enumerate(outputs):  # allocated on every run: checked once, here
            check_alloc(f"output {i} of the model", shape, dtype)
        self._arenas = ArenaPool(arena_bytes, len(self._params), len(outputs))
        self._weights = [aligned(w) for w in weights]
        self._weight_ptrs = (ctypes.c_void_p * max(len(weights), 1))(*[w.ctypes.data for w in self._weights])
        self._entry = getattr(library.lib, ENTRY)
        self._entry.argtypes = [ctypes.c_void_p] * 4
        self._entry.restype = ctypes.c_int32
        self.calls = calls  # per kernel call in entry order: its group's ops and nodes, for errors
        self._failed_call = getattr(library.lib, FAILED_CALL)
        self._failed_call.restype = ctypes.c_int32
        self._profile_entry = getattr(library.lib, PROFILE_ENTRY)
        self._profile_entry.argtypes = [ctypes.c_void_p] * 5
        self._profile_entry.restype = ctypes.c_int32
        self._run_from = getattr(library.lib, RUN_FROM_ENTRY, None)  # None: built before it existed
        if self._run_from is not None:
            self._run_from.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int32, ctypes.POINTER(ctypes.c_int32)]
            self._run_from.restype = ctypes.c_int32
        self.run_control: RunControl | None = None  # Kiln's pool, when the kernels launch into it
        self._report = report
        # per input: the array a run passes as it is (dtype, shape, C order); anything else goes
        # through check_input
        self._names = tuple(n for n, _ in self._params)
        self._expected = tuple((to_numpy(t.dtype), tuple(t.shape)) if isinstance(t, TensorType) else (None, None)
                               for _, t in self._params)

    @property
    def weights(self) -> list[np.ndarray]:
        """The arrays `kiln_model_run` reads its weights from, in its order."""
        return self._weights

    @property
    def output_layout(self) -> list[tuple[tuple[int, ...], np.dtype]]:
        return list(self._outputs)

    def run(self, feeds: dict[str, Any]) -> list[np.ndarray]:
        return self._call(feeds, None)

    def profile(self, feeds: dict[str, Any], runs: int = 1) -> list[tuple[str, float]]:
        """(kernel name, seconds per run) of every kernel call, in the order the entry makes them:
        timed inside `kiln_model_profile`, the same run with a clock read around each call."""
        order = self._report.order
        seconds = (ctypes.c_double * max(len(order), 1))()
        for _ in range(runs):
            self._call(feeds, seconds)
        return [(name, seconds[i] / runs) for i, name in enumerate(order)]

    def start(self, feeds: dict[str, Any], control: RunControl | None = None) -> PreemptibleRun:
        """A run of `feeds` that has not started: `run()` it on some thread, `cancel()` it from any
        other, `resume()` it after a preemption (kiln.runtime.run_handle). It holds an arena from
        now on, so a run beyond the memory limit fails here, before any kernel. `control`: the
        pool's run control on the cores it should use (default `run_control`: all of them)."""
        if self._run_from is None:
            raise ArtifactError(f"this model's library has no {RUN_FROM_ENTRY} (it was compiled by an older "
                                "Kiln); compile it again to run it preemptibly")
        arrays = self._inputs(feeds)
        outs = [np.empty(shape, dtype) for shape, dtype in self._outputs]
        return PreemptibleRun(self._enter_from, self._failure, self._arenas, arrays, outs,
                              control or self.run_control)

    @property
    def arena_pool(self) -> ArenaPool:
        return self._arenas

    def _enter_from(self, slot: RunSlot, start: int, stopped: ctypes.c_int32) -> int:
        return self._run_from(slot.in_ptrs, slot.out_ptrs, slot.arena_ptr, self._weight_ptrs, start,
                              ctypes.byref(stopped))

    def _failure(self, rc: int, k: int) -> KilnError:
        """The error of a run whose call k (in entry order) returned rc."""
        where = f"kernel {self._report.order[k]}" if 0 <= k < len(self._report.order) else ENTRY
        if 0 <= k < len(self.calls):
            where += f" ({self.calls[k]})"
        from kiln.codegen.module import kernel_error_text  # with tir: only a failed run needs it

        return KernelError(f"{where} failed: {kernel_error_text(rc)}")

    def _inputs(self, feeds: dict[str, Any]) -> list[np.ndarray]:
        """The arrays the entry reads, in parameter order; checked where they are not as expected."""
        # the checks a run repeats are kept to a few attribute reads: on a small model (an MLP is
        # 0.06 ms) the Python around the ctypes call is a sixth of the latency
        if len(feeds) != len(self._names) or not all(n in feeds for n in self._names):
            self._refuse_names(feeds)
        arrays = []
        for (name, t), (dtype, shape) in zip(self._params, self._expected):
            v = feeds[name]
            if not (type(v) is np.ndarray and v.dtype == dtype and v.shape == shape and v.flags.c_contiguous):
                v = np.ascontiguousarray(check_input(name, v, t, {}))
            arrays.append(v)
        return arrays

    def _call(self, feeds: dict[str, Any], seconds: Any) -> list[np.ndarray]:
        arrays = self._inputs(feeds)
        outs = [np.empty(shape, dtype) for shape, dtype in self._outputs]
        slot = self._arenas.acquire()
        try:
            slot.point(arrays, outs)
            with running():
                if seconds is None:
                    rc = self._entry(slot.in_ptrs, slot.out_ptrs, slot.arena_ptr, self._weight_ptrs)
                else:
                    rc = self._profile_entry(slot.in_ptrs, slot.out_ptrs, slot.arena_ptr, self._weight_ptrs, seconds)
            if rc != 0:
                raise self._failure(rc, self._failed_call())  # failed_call is per thread: read it here
        finally:
            self._arenas.release(slot)
        return outs

    def _refuse_names(self, feeds: dict[str, Any]) -> None:
        names = self._names
        missing = [n for n in names if n not in feeds]
        unknown = sorted(set(feeds) - set(names))
        parts = ([f"unknown: {', '.join(unknown)}"] if unknown else []) + \
                ([f"missing: {', '.join(missing)}"] if missing else [])
        raise InputError(f"inputs {'; '.join(parts)}; the model's inputs are {', '.join(names) or '(none)'}")

    def memory_report(self) -> MemoryReport:
        return self._report
