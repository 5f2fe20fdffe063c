"""Run control blocks of Kiln's thread pool (kiln_pool.h) for runs that can be preempted.

A PreemptibleRun takes a block of its own for its whole life (a block remembers where a preempted
launch stopped, so it must not pass to another run) and binds it to whichever thread runs it, on
the cores of its partition, for the length of each `run()`. That binding replaces the thread's
own (kiln.runtime.thread_pool.running), so a preemptible run is not run from inside another run.
"""

from __future__ import annotations

from kiln.errors import KilnError
from kiln.runtime.thread_pool import Partition, runtime


class PoolRuns:
    """kiln_pool.h's run control for runs on `partition` of the process's pool (default: every core
    the runtime has when the run begins)."""

    def __init__(self, partition: Partition | None = None):
        self.partition = partition
        self._lib = runtime().pool()

    def new(self) -> int:
        run = self._lib.kiln_run_new()
        if not run:
            raise KilnError("Kiln's thread pool could not allocate a run control block (out of memory)")
        return run

    def free(self, run: int) -> None:
        self._lib.kiln_run_free(run)

    def begin(self, run: int) -> None:
        part = self.partition or runtime().default_partition()
        self._lib.kiln_run_begin(run, part.first, part.cores)

    def end(self) -> None:
        self._lib.kiln_run_end()

    def cancel(self, run: int) -> None:
        self._lib.kiln_run_cancel(run)

    def wait(self, run: int, timeout_s: float) -> float | None:
        """Wait (the GIL released) up to `timeout_s` for `run` to stop or end: when it did, on
        time.perf_counter's clock (both are CLOCK_MONOTONIC), or None if it is still running."""
        ns = self._lib.kiln_run_wait(run, max(0, round(timeout_s * 1e6)))
        return ns * 1e-9 if ns else None
