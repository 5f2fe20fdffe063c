"""One run of an AOT model in flight that can be cancelled from another thread and resumed later.

`AotExecutor.start(feeds)` makes a `PreemptibleRun`; `run()` runs it on the calling thread through
`kiln_model_run_from` from the step it stands at, until it finishes (the outputs) or a cancel is
seen (preempted at step k); `run()` again resumes from step k. Why a resumed run computes what an
uninterrupted one would:
- the run keeps its arena while stopped (no other run gets it), and the memory plan gives two
  tensors that are alive at once disjoint bytes: every tensor a step >= k reads was written by a
  step < k (or is an input or a weight) and nothing before step k wrote over it;
- a kernel never writes what it reads (the plan keeps a step's inputs alive through the step), so
  step k's inputs are intact after its partial run, and running it again (whole, or only the
  chunks Kiln's pool did not finish) writes its outputs in full;
- the run keeps its inputs: at the first preemption it copies the arrays it was fed, so a caller
  reusing them meanwhile changes nothing; weights are read-only; the outputs are its own arrays.

A cancel is a request: with Kiln's pool it stops the running launch at its next chunk boundary
(`kiln_run_cancel`); a run whose remaining steps launch nothing finishes instead. Without the pool
(an OpenMP build) kernels have no checkpoints: a cancel before `run()` preempts at the current
step, one while running is not seen and the run finishes. A cancel after the end does nothing.
"""

from __future__ import annotations

import ctypes
import enum
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from kiln.errors import KilnError, RunStateError
from kiln.runtime.arena_pool import ArenaPool, RunSlot

KILN_PREEMPTED = 1  # kiln_pool.h


class RunControl(Protocol):
    """Kiln's pool as a run sees it: kiln_pool.h's run control blocks (pointers as ints)."""

    def new(self) -> int: ...

    def free(self, run: int) -> None: ...

    def begin(self, run: int) -> None:
        """Bind `run` to the calling thread, on the cores this run is given."""

    def end(self) -> None: ...

    def cancel(self, run: int) -> None: ...

    def wait(self, run: int, timeout_s: float) -> float | None:
        """When `run` stopped or ended (time.perf_counter's clock), waiting up to timeout_s; None: running."""


class RunState(enum.Enum):
    READY = "ready"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED = "finished"
    FAILED = "failed"
    CLOSED = "closed"


@dataclass(frozen=True)
class RunResult:
    """What one `run()` of a PreemptibleRun came to: the outputs, or the step a cancel stopped it in."""

    outputs: list[np.ndarray] | None
    preempted_at: int | None = None

    @property
    def preempted(self) -> bool:
        return self.preempted_at is not None


# (slot, start step, stopped step) -> the entry's return code
Entry = Callable[[RunSlot, int, ctypes.c_int32], int]
# (return code, step) -> the error naming the kernel that failed
Failure = Callable[[int, int], KilnError]


class PreemptibleRun:
    """A run of one model that owns an arena of the executor's pool from `start` until it finishes,
    fails or is closed; a handle dropped while stopped gives its arena back when collected."""

    def __init__(self, entry: Entry, fail: Failure, pool: ArenaPool, inputs: list[np.ndarray],
                 outputs: list[np.ndarray], control: RunControl | None):
        self._entry, self._fail, self._control = entry, fail, control
        self._slot = pool.acquire()
        try:
            self._block = control.new() if control is not None else 0
        except BaseException:
            pool.release(self._slot)
            raise
        self._release = weakref.finalize(self, _release, pool, self._slot, control, self._block)
        self._inputs, self._outputs = inputs, outputs
        self._own_inputs = False
        self._lock = threading.Lock()
        self._state = RunState.READY
        self._step = 0
        self._cancel = False  # asked for and not yet answered by a preemption or the end
        self._bound = False  # the block is bound to the running thread: kiln_run_cancel reaches it
        self._stopped = ctypes.c_int32(0)
        self._waiters = 0  # threads in wait_stopped: the block is freed only once they left it
        self._release_due = False

    @property
    def state(self) -> RunState:
        return self._state

    @property
    def step(self) -> int:
        """The step the next `run()` starts from."""
        return self._step

    def run(self) -> RunResult:
        """Run from the current step on this thread until the end or a preemption."""
        with self._lock:
            if self._state not in (RunState.READY, RunState.PREEMPTED):
                raise RunStateError(f"this run is {self._state.value}; only a run that is ready or "
                                    "preempted can run")
            self._state = RunState.RUNNING
        control = self._control
        if control is not None:
            control.begin(self._block)
        try:
            with self._lock:
                if self._cancel:
                    return self._preempted(self._step)
                self._bound = True
            self._slot.point(self._inputs, self._outputs)
            rc = self._entry(self._slot, self._step, self._stopped)
        finally:
            if control is not None:
                control.end()
        return self._answer(rc)

    resume = run

    def cancel(self) -> None:
        """Ask the run to stop (any thread): see the module doc for when it is seen."""
        with self._lock:
            if self._state in (RunState.FINISHED, RunState.FAILED, RunState.CLOSED):
                return
            self._cancel = True
            if self._bound:
                self._control.cancel(self._block)

    def wait_stopped(self, timeout_s: float) -> float | None:
        """From any thread: wait up to `timeout_s` for the running kernels to stop (at a cancel) or the
        run to end; when that was (time.perf_counter's clock), or None if still running. Answered by
        the pool itself, so it does not wait for the running thread to get the GIL back. A run
        without Kiln's pool, or one already over, answers None at once."""
        with self._lock:
            if self._control is None or self._state in (RunState.FINISHED, RunState.FAILED, RunState.CLOSED):
                return None
            self._waiters += 1
        try:
            return self._control.wait(self._block, timeout_s)
        finally:
            with self._lock:
                self._waiters -= 1
                release = self._release_due and not self._waiters
            if release:
                self._release()

    def close(self) -> None:
        """Drop a run that will not be resumed: its arena goes back to the pool."""
        with self._lock:
            if self._state is RunState.RUNNING:
                raise RunStateError("a running run cannot be closed; cancel it and close it once run() returned")
            if self._state is RunState.PREEMPTED or self._state is RunState.READY:
                self._state = RunState.CLOSED
        self._release_unwaited()

    def _release_unwaited(self) -> None:
        """Give back the arena and block now, or when the last wait_stopped leaves the block."""
        with self._lock:
            self._release_due = bool(self._waiters)
            if self._release_due:
                return
        self._release()

    def _answer(self, rc: int) -> RunResult:
        with self._lock:
            self._bound = False
            if rc == KILN_PREEMPTED:
                return self._preempted(self._stopped.value)
            self._cancel = False
            self._state = RunState.FINISHED if rc == 0 else RunState.FAILED
        self._release_unwaited()
        if rc != 0:
            raise self._fail(rc, self._stopped.value)
        return RunResult(self._outputs)

    def _preempted(self, step: int) -> RunResult:
        """(under the lock) stop at `step`, keeping the arena and a copy of the inputs."""
        self._cancel = False
        self._state, self._step = RunState.PREEMPTED, step
        if not self._own_inputs:
            self._inputs = [np.array(v) for v in self._inputs]
            self._own_inputs = True
        return RunResult(None, step)


def _release(pool: ArenaPool, slot: RunSlot, control: RunControl | None, block: int) -> None:
    """Give back what a run held (once: weakref.finalize calls it on the end, close or collection)."""
    if control is not None:
        control.free(block)
    pool.release(slot)
