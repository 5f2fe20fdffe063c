"""The AOT executor: a static-shape model compiled into one C entry function, run by one ctypes call.

kiln.compiler.aot builds it (fused groups, a memory plan, `kiln_model_run` in the kernels' library);
kiln.runtime.artifact loads it again. No Python runs between kernels.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from kiln.codegen.aot_abi import ENTRY, FAILED_CALL, PROFILE_ENTRY
from kiln.codegen.module import kernel_error_text
from kiln.errors import InputError, KernelError, KilnError
from kiln.ir.aligned import aligned, aligned_empty
from kiln.ir.dtype import to_numpy
from kiln.ir.input_check import check_input
from kiln.ir.module import IRModule
from kiln.ir.sizes import check_alloc, check_bytes
from kiln.ir.types import TensorType
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
    """A compiled model: `run(feeds)` is one call into `kiln_model_run`. The arena is allocated
    once and reused, so runs of one module are serialized by a lock."""

    def __init__(self, mod: IRModule, weights: list[np.ndarray], outputs: list[tuple[tuple[int, ...], np.dtype]],
                 arena_bytes: int, library: Any, report: MemoryReport, calls: tuple[str, ...] = ()):
        self.mod, self.library, self.arena_bytes = mod, library, arena_bytes
        self._params = [(p.name, p.type) for p in mod.main.params]
        self._outputs = outputs
        for i, (shape, dtype) in enumerate(outputs):  # allocated on every run: checked once, here
            check_alloc(f"output {i} of the model", shape, dtype)
        check_bytes("the arena of intermediate tensors", arena_bytes)
        self._weights = [aligned(w) for w in weights]
        self._weight_ptrs = (ctypes.c_void_p * max(len(weights), 1))(*[w.ctypes.data for w in self._weights])
        self._arena = aligned_empty(arena_bytes, np.uint8)
        self._arena_ptr = ctypes.c_void_p(self._arena.ctypes.data)
        self._entry = getattr(library.lib, ENTRY)
        self._entry.argtypes = [ctypes.c_void_p] * 4
        self._entry.restype = ctypes.c_int32
        self.calls = calls  # per kernel call in entry order: its group's ops and nodes, for errors
        self._failed_call = getattr(library.lib, FAILED_CALL)
        self._failed_call.restype = ctypes.c_int32
        self._profile_entry = getattr(library.lib, PROFILE_ENTRY)
        self._profile_entry.argtypes = [ctypes.c_void_p] * 5
        self._profile_entry.restype = ctypes.c_int32
        self._lock = threading.Lock()
        self._report = report
        # per input: the array a run passes as it is (dtype, shape, C order); anything else goes
        # through check_input. The pointer arrays are filled under the lock on every run.
        self._names = tuple(n for n, _ in self._params)
        self._expected = tuple((to_numpy(t.dtype), tuple(t.shape)) if isinstance(t, TensorType) else (None, None)
                               for _, t in self._params)
        self._in_ptrs = (ctypes.c_void_p * max(len(self._params), 1))()
        self._out_ptrs = (ctypes.c_void_p * max(len(outputs), 1))()

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

    def _call(self, feeds: dict[str, Any], seconds: Any) -> list[np.ndarray]:
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
        outs = [np.empty(shape, dtype) for shape, dtype in self._outputs]
        with self._lock, running():
            ins, out_ptrs = self._in_ptrs, self._out_ptrs
            for i, v in enumerate(arrays):
                ins[i] = v.ctypes.data
            for i, o in enumerate(outs):
                out_ptrs[i] = o.ctypes.data
            if seconds is None:
                rc = self._entry(ins, out_ptrs, self._arena_ptr, self._weight_ptrs)
            else:
                rc = self._profile_entry(ins, out_ptrs, self._arena_ptr, self._weight_ptrs, seconds)
            if rc != 0:
                k = self._failed_call()
        if rc != 0:
            where = f"kernel {self._report.order[k]}" if 0 <= k < len(self._report.order) else ENTRY
            if 0 <= k < len(self.calls):
                where += f" ({self.calls[k]})"
            raise KernelError(f"{where} failed: {kernel_error_text(rc)}")
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
