"""The measuring child process: load compiled kernels, run them on random inputs, print their times.

Run as a script (`python runner.py`), not as `-m kiln.tune.runner`, so that a measurement does not
pay for importing Kiln: it needs only ctypes and numpy. It reads one JSON job from stdin and prints
one JSON line per kernel as soon as that kernel is done, so the parent can tell which kernel hung or
crashed the process. The thread count is fixed by the parent through OMP_NUM_THREADS.
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


def measure(kernel: dict, job: dict, libs: dict[str, ctypes.CDLL]) -> dict:
    lib = libs.get(kernel["lib"]) or libs.setdefault(kernel["lib"], ctypes.CDLL(kernel["lib"]))
    fn = getattr(lib, kernel["symbol"])
    fn.argtypes = [ctypes.POINTER(Value), ctypes.c_int32]
    fn.restype = ctypes.c_int32
    rng = np.random.default_rng(0)
    args = kernel["args"]
    arrays = [_array(a, rng) if a["role"] != "scalar" else None for a in args]
    values = (Value * max(len(args), 1))()
    for k, (a, arr) in enumerate(zip(args, arrays)):
        if arr is None:
            values[k].i = int(a["value"])
        else:
            values[k].p = arr.ctypes.data
    n = len(args)
    for _ in range(max(job.get("warmup", 1), 1)):
        rc = fn(values, n)
        if rc != 0:
            return {"error": f"kernel returned error code {rc}"}
    t0 = time.perf_counter()
    fn(values, n)
    once = max(time.perf_counter() - t0, 1e-9)
    number = int(min(max(job.get("min_seconds", 0.0) / once, 1), MAX_NUMBER))
    times = []
    for _ in range(max(job.get("repeats", 3), 1)):
        t0 = time.perf_counter()
        for _ in range(number):
            fn(values, n)
        times.append((time.perf_counter() - t0) / number)
    outputs = [arr for a, arr in zip(args, arrays) if a["role"] == "output"]
    return {"seconds": statistics.median(times), "all": times, "check": sample(outputs)}


def main() -> int:
    job = json.load(sys.stdin)
    libs: dict[str, ctypes.CDLL] = {}
    for i, kernel in enumerate(job["kernels"]):
        try:
            result = measure(kernel, job, libs)
        except Exception as err:  # a bad library or symbol is this kernel's failure, not the batch's
            result = {"error": f"{type(err).__name__}: {err}"}
        print(json.dumps({"i": i, **result}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
