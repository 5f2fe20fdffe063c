"""Runs in flight on worker threads: `RunQueue.submit` returns a `concurrent.futures.Future` at once.

Runs overlap for real: ctypes releases the GIL for the length of every kernel or AOT entry call, and
an AOT run takes an arena of its own from its executor's pool (kiln.runtime.arena_pool), so no lock
is held across a run. Each model has its own queue, so requests on different models overlap too.
For asyncio, `asyncio.wrap_future(future)` (what `InferenceSession.run_asyncio` awaits).
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any


class RunQueue:
    """A pool of `workers` threads, started on the first submit. A submitted call runs in a copy of
    the caller's context, so a memory limit in force where it was submitted bounds it too."""

    def __init__(self, workers: int):
        self.workers = workers
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="kiln-run")
        return self._pool.submit(contextvars.copy_context().run, fn, *args)

    def close(self) -> None:
        """Wait for the runs submitted and stop the workers; a later submit starts them again."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
