"""The measuring child process: load compiled kernels, run them on random inputs, print their times.

Run as a script (`python runner.py`), not as `-m kiln.tune.runner`, so that a measurement does not
pay for importing Kiln: it needs only ctypes and numpy. It reads one JSON job from stdin and prints
one JSON line per kernel as soon as that kernel is loaded, warmed up and checked ("ready", or its
error), so the parent can tell which kernel hung or crashed the process; then it times the ready
kernels round-robin, one repeat of each in turn, each round starting one kernel later (the first of a
round ran up to 20% slower), and prints their times. Interleaved, the candidates of a batch see the
same machine: on a shared machine whose speed drifts by 2x within minutes, kernels timed one after
another are compared across moments of different speed (the tuner pairs each candidate's repeats with
its default's, kiln.tune.tuner._paired). The thread count is fixed by the parent: through
OMP_NUM_THREADS for OpenMP kernels, and as the partition of Kiln's thread pool (loaded first, with
RTLD_GLOBAL, as kiln.codegen.loader does) bound to this process's thread for kernels that launch into it.
"""

from __future__ import annotations

import ctypes
import json
import statistics
import sys
import time

import numpy as np

MAX_NUMBER = 100_000  # calls per repeat, however fast the kernel
CHECK_VALUES = 256  # output values sampled for the parent's comparison with the default schedule's
POOL_SPIN_US = 25  # kiln.runtime.thread_pool's default: kernels wait as they will in a model


class Value(ctypes.Union):
    """kiln_value_t of the generated module's ABI (kiln.codegen.module.KilnValue; kept apart to keep
    this process free of Kiln imports)."""

    _fields_ = [("i", ctypes.c_int64), ("f", ctypes.c_double), ("p", ctypes.c_void_p)]


def _array(spec: dict, rng: np.random.Generator) -> np.ndarray:
    if spec.get("file"):
        return np.ascontiguousarray(np.load(spec["file"], allow_pickle=False))
    dtype, shape = np.dtype(spec["dtype"]), tuple(spec["shape"])
    if spec.get("role") == "input" and dtype.kind in "fc":
        return rng.standard_normal(shape).astype(dtype)
    return np.zeros(shape, dtype)  # integer inputs are indices: 0 is always in bounds


def sample(outputs: list[np.ndarray]) -> list[float | None]:
    """Evenly spaced values of the outputs (as floats; None for NaN), the same positions for every
    schedule of a kernel: enough to catch a schedule that computes something else."""
    flat = np.concatenate([o.reshape(-1).astype(np.float64) for o in outputs]) if outputs else np.zeros(0)
    picked = flat[np.linspace(0, len(flat) - 1, min(len(flat), CHECK_VALUES)).astype(np.int64)] if len(flat) else flat
    return [None if np.isnan(v) else float(v) for v in picked]


class Kernel:
    """One loaded kernel with its arguments, warmed up, and calls per repeat calibrated."""

    def __init__(self, kernel: dict, job: dict, libs: dict[str, ctypes.CDLL]):
        lib = libs.get(kernel["lib"]) or libs.setdefault(kernel["lib"], ctypes.CDLL(kernel["lib"]))
        self.fn = getattr(lib, kernel["symbol"])
        self.fn.argtypes = [ctypes.POINTER(Value), ctypes.c_int32]
        self.fn.restype = ctypes.c_int32
        rng = np.random.default_rng(0)
        args = kernel["args"]
        self.arrays = [_array(a, rng) if a["role"] != "scalar" else None for a in args]
        self.values = (Value * max(len(args), 1))()
        for k, (a, arr) in enumerate(zip(args, self.arrays)):
            if arr is None:
                self.values[k].i = int(a["value"])
            else:
                self.values[k].p = arr.ctypes.data
        self.n = len(args)
        self.error = None
        for _ in range(max(job.get("warmup", 1), 1)):
            rc = self.fn(self.values, self.n)
            if rc != 0:
                self.error = f"kernel returned error code {rc}"
                return
        t0 = time.perf_counter()
        self.fn(self.values, self.n)
        once = max(time.perf_counter() - t0, 1e-9)
        self.number = int(min(max(job.get("min_seconds", 0.0) / once, 1), MAX_NUMBER))
        # before the timed calls: what the parent compares
        self.check = sample([arr for a, arr in zip(args, self.arrays) if a["role"] == "output"])
        self.times: list[float] = []

    def repeat(self) -> None:
        fn, values, n, number = self.fn, self.values, self.n, self.number
        t0 = time.perf_counter()
        for _ in range(number):
            fn(values, n)
        self.times.append((time.perf_counter() - t0) / number)


def bind_pool(path: str, threads: int) -> None:
    """Load Kiln's thread pool before any kernel and run this thread's launches on `threads` cores."""
    pool = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    pool.kiln_run_new.restype = ctypes.c_void_p
    pool.kiln_run_begin.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32]
    pool.kiln_pool_configure(threads, POOL_SPIN_US, 0)
    pool.kiln_run_begin(pool.kiln_run_new(), 0, threads)


def main() -> int:
    job = json.load(sys.stdin)
    if job.get("pool"):
        bind_pool(job["pool"], max(int(job.get("threads", 1)), 1))
    libs: dict[str, ctypes.CDLL] = {}
    ready: list[tuple[int, Kernel]] = []
    for i, kernel in enumerate(job["kernels"]):
        try:
            k = Kernel(kernel, job, libs)
        except Exception as err:  # a bad library or symbol is this kernel's failure, not the batch's
            print(json.dumps({"i": i, "error": f"{type(err).__name__}: {err}"}), flush=True)
            continue
        if k.error is not None:
            print(json.dumps({"i": i, "error": k.error}), flush=True)
            continue
        ready.append((i, k))
        print(json.dumps({"i": i, "ready": True}), flush=True)
    for r in range(max(job.get("repeats", 3), 1)):
        for j in range(len(ready)):  # each round starts one kernel later: none always first (up to 20% slower)
            ready[(r + j) % len(ready)][1].repeat()
    for i, k in ready:
        print(json.dumps({"i": i, "seconds": statistics.median(k.times), "all": k.times, "check": k.check}),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
