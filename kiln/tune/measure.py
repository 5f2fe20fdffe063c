"""Timing compiled kernels in a separate process, with a timeout per kernel.

A candidate schedule may crash (a bad index), hang, or simply be slow; none of that may take the
tuner down. The child (runner.py) measures a batch of kernels and reports each as it finishes. A
kernel that does not report within `timeout` seconds gets its process killed and is recorded as a
timeout; a kernel that kills the process is recorded as a crash; the child is restarted for the rest.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import numpy as np

from kiln.codegen import openmp_env, pool_library

RUNNER = Path(__file__).with_name("runner.py")
STARTUP_SECONDS = 10.0  # allowance for the child to start (python + numpy) before its first kernel


@dataclass(frozen=True)
class KernelSpec:
    """A kernel to time: library, exported symbol, and its arguments in parameter order. Each argument
    is {"role": "input" | "const" | "output" | "scalar", "dtype", "shape"} (+ "file" for constants,
    "value" for scalars)."""

    lib: str
    symbol: str
    args: tuple[dict, ...]


@dataclass(frozen=True)
class MeasureOptions:
    threads: int = 1
    timeout: float = 10.0  # seconds per kernel (warmup and repeats included)
    warmup: int = 1
    repeats: int = 10
    min_seconds: float = 0.005  # each repeat calls the kernel enough times to last this long


def same_outputs(a: list[float | None], b: list[float | None], rtol: float = 1e-3, atol: float = 1e-5) -> bool:
    """Whether two output samples agree (up to the rounding a reordered loop may change)."""
    if len(a) != len(b):
        return False
    x = np.array([np.nan if v is None else v for v in a], dtype=np.float64)
    y = np.array([np.nan if v is None else v for v in b], dtype=np.float64)
    return bool(np.allclose(x, y, rtol=rtol, atol=atol, equal_nan=True))


@dataclass
class MeasureResult:
    seconds: float | None  # the median of the repeats; None when the kernel failed
    error: str | None = None  # "timeout: ...", "crash: ...", "compile: ...", ...
    repeats: list[float] = field(default_factory=list)
    check: list[float | None] | None = None  # sampled output values (runner.sample), to compare schedules

    @property
    def ok(self) -> bool:
        return self.seconds is not None


def run_kernels(specs: Sequence[KernelSpec], options: MeasureOptions = MeasureOptions()) -> list[MeasureResult]:
    """Time every kernel in a child process; failures are results, never exceptions."""
    results: list[MeasureResult | None] = [None] * len(specs)
    pending = list(range(len(specs)))
    while pending:
        done = _run_child([specs[i] for i in pending], options)
        for j, res in done.items():
            results[pending[j]] = res
        pending = [i for j, i in enumerate(pending) if j not in done]
    return [r for r in results if r is not None]


def _job(specs: Sequence[KernelSpec], options: MeasureOptions) -> bytes:
    return json.dumps({"warmup": options.warmup, "repeats": options.repeats, "min_seconds": options.min_seconds,
                       "pool": str(pool_library.build()), "threads": options.threads,
                       "kernels": [{"lib": s.lib, "symbol": s.symbol, "args": list(s.args)} for s in specs]}).encode()


def _run_child(specs: Sequence[KernelSpec], options: MeasureOptions) -> dict[int, MeasureResult]:
    """Results of some of `specs` (at least one), by index: the child stops at the first kernel that hangs
    or crashes it while being loaded and warmed up; that kernel's result is the failure, and the kernels
    before it, not yet timed, go to the next child."""
    # NOTE: numpy's BLAS must not start threads of its own in the child: they would compete with the
    # kernel's OpenMP team for the cores (a 2-thread GEMV measured 5-8 ms instead of 0.02)
    env = dict(os.environ, OMP_NUM_THREADS=str(options.threads), OMP_PROC_BIND="false", OPENBLAS_NUM_THREADS="1",
               MKL_NUM_THREADS="1")
    openmp_env.configure(env)  # kernels wait as they will in a model
    with tempfile.TemporaryFile() as stderr:  # NOTE: a file, not a pipe: a chatty child cannot block on it
        proc = subprocess.Popen([sys.executable, str(RUNNER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=stderr, env=env, start_new_session=True)
        try:
            return _collect(proc, specs, options, stderr)
        finally:
            _kill(proc)


def _collect(proc: subprocess.Popen, specs: Sequence[KernelSpec], options: MeasureOptions,
             stderr: IO[bytes]) -> dict[int, MeasureResult]:
    """Read the child's results until all are in, a kernel times out, or the child dies. First one line
    per kernel in order, "ready" or its error (`timeout` seconds each), then the times of the ready
    kernels, timed round-robin (`timeout` seconds per ready kernel in all)."""
    results: dict[int, MeasureResult] = {}
    ready: list[int] = []
    loaded = 0  # kernels the child has reported on in the first part; the next one is being loaded
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(_job(specs, options))
        proc.stdin.close()
    except BrokenPipeError:
        pass
    deadline = [time.monotonic() + STARTUP_SECONDS + options.timeout]
    for line in _lines(proc, lambda: deadline[0]):
        if line is None:
            if loaded < len(specs):
                return {**results, loaded: MeasureResult(None, f"timeout: no result within {options.timeout:g} s")}
            return {**results, **{i: MeasureResult(None, f"timeout: timing took over {options.timeout:g} s a kernel")
                                  for i in ready if i not in results}}
        try:
            msg = json.loads(line)
        except ValueError:
            continue  # something the kernel's libraries printed, not ours
        if not isinstance(msg, dict) or not isinstance(msg.get("i"), int) or not 0 <= msg["i"] < len(specs):
            continue
        i = msg["i"]
        if "seconds" in msg and i in ready:
            results[i] = MeasureResult(msg["seconds"], None, msg["all"], msg.get("check"))
        elif loaded < len(specs) and ("error" in msg or msg.get("ready")):
            loaded += 1
            if "error" in msg:
                results[i] = MeasureResult(None, f"error: {msg['error']}")
            else:
                ready.append(i)
            # the next kernel's loading, or once all are loaded the round-robin timing of the ready ones
            deadline[0] = time.monotonic() + options.timeout * (1 if loaded < len(specs) else len(ready))
        if len(results) == len(specs):
            return results
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        _kill(proc)
    stderr.seek(0)
    err = stderr.read().decode(errors="replace").strip().splitlines()
    why = f"exit {proc.returncode}" if proc.returncode >= 0 else f"signal {signal.Signals(-proc.returncode).name}"
    crash = MeasureResult(None, f"crash: measuring process died ({why})" + (f": {err[-1]}" if err else ""))
    if loaded < len(specs):  # the kernel being loaded killed it; the ready ones go on
        return {**results, loaded: crash}
    return {**results, **{i: crash for i in ready if i not in results}}


def _lines(proc: subprocess.Popen, deadline):
    """The child's stdout lines as they come; None once the current deadline passes; ends at EOF."""
    fd = proc.stdout.fileno()
    buf = b""
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                yield line.decode()
            left = deadline() - time.monotonic()
            if left <= 0 or not sel.select(timeout=left):
                yield None
                return
            chunk = os.read(fd, 65536)
            if not chunk:
                return
            buf += chunk


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the child and any threads/processes it started
        except ProcessLookupError:
            pass
    proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()
