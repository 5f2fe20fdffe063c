"""Run control blocks of Kiln's thread pool (kiln_pool.h) for runs that can be preempted.

A PreemptibleRun takes a block of its own for its whole life (a block remembers where a preempted
launch stopped, so it must not pass to another run) and binds it to whichever thread runs it, on
the cores of its partition, for the length of each `run()`.
"""

from __future__ import annotations

from kiln.codegen import pool_library
from kiln.errors import KilnError


class PoolRuns:
    """kiln_pool.h's run control for runs on cores [first, first + cores) of the process's pool
    (all of them by default)."""

    def __init__(self, first: int = 0, cores: int | None = None):
        self._lib = pool_library.load()
        self.first = first
        self.cores = cores if cores is not None else self._lib.kiln_pool_cores()

    def new(self) -> int:
        run = self._lib.kiln_run_new()
        if not run:
            raise KilnError("Kiln's thread pool could not allocate a run control block (out of memory)")
        return run

    def free(self, run: int) -> None:
        self._lib.kiln_run_free(run)

    def begin(self, run: int) -> None:
        self._lib.kiln_run_begin(run, self.first, self.cores)

    def end(self) -> None:
        self._lib.kiln_run_end()

    def cancel(self, run: int) -> None:
        self._lib.kiln_run_cancel(run)
