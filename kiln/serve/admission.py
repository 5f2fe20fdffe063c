"""What every queueing Dispatcher does before a run: admit a request into the queues, and fail the
ones taken out of them unrun.

The in-process REEF scheduler (kiln.serve.scheduler) and the Ray dispatcher (kiln.distributed.
replica_dispatcher) differ in what a run is, not in admission: an unknown model, a closed server,
bad feeds and a full queue fail at once and are counted the same way; a request's deadline goes on one
heap; a request failed before it ran counts as a request and a failure (and a timeout when it timed
out). Subclasses hold `_cv` while they touch the queues, the heap or the stats.
"""

from __future__ import annotations

import copy
import heapq
import itertools
import threading
import time
from concurrent.futures import Future

from kiln.errors import (
    KilnError,
    QueueFullError,
    RequestTimeoutError,
    ServeError,
    ServerClosedError,
    UnknownModelError,
)
from kiln.serve.dispatch import InferRequest, ModelStats
from kiln.serve.queues import Pending, Queues
from kiln.serve.served import Served


class Admission:
    """The queues, the deadline heap and the stats of a dispatcher, and `submit` over them."""

    def __init__(self, fifo: bool) -> None:
        self.fifo = fifo
        self._cv = threading.Condition()
        self._served: dict[str, Served] = {}
        self._stats: dict[str, ModelStats] = {}
        self._queues = Queues(fifo)
        self._deadlines: list[tuple[float, int, Pending]] = []
        self._seq = itertools.count()
        self._closed = False

    def submit(self, request: InferRequest) -> Future:
        with self._cv:
            entry = self._served.get(request.model)
            closed = self._closed
        if closed:
            return failed(ServerClosedError("the server is shutting down and takes no more requests"))
        if entry is None:
            return failed(UnknownModelError(f"no model named '{request.model}' is served"))
        try:
            feeds = entry.check(request)
        except KilnError as e:
            with self._cv:
                self._stats[entry.name].requests += 1
                self._stats[entry.name].failures += 1
            return failed(e)
        timeout = entry.timeout(request)
        p = Pending(request, entry, feeds, entry.priority(request),
                    None if timeout is None else request.arrival + timeout)
        with self._cv:
            if self._queues.queued(entry.name) >= entry.config.queue_limit:
                self._stats[entry.name].refused += 1
                return failed(QueueFullError(f"model '{entry.name}' has {entry.config.queue_limit} requests "
                                             "queued (its queue limit); try again later"))
            self._queues.push(p)
            if p.deadline is not None:
                heapq.heappush(self._deadlines, (p.deadline, next(self._seq), p))
            self._queued(p)
            self._cv.notify_all()
        return p.future

    def _stop_admitting(self, drain: bool) -> None:
        """Take no more requests; without `drain` fail the queued ones now (with it, they still run)."""
        with self._cv:
            self._closed = True
            dropped = [] if drain else self._queues.clear()
            self._cv.notify_all()
        self._settle(dropped, ServerClosedError("the server shut down before this request ran"))

    def _queued(self, p: Pending) -> None:
        """(under the lock) `p` was just queued: what a subclass does before the lanes wake."""

    def stats(self) -> dict[str, ModelStats]:
        with self._cv:
            return copy.deepcopy(self._stats)

    def _expired(self) -> list[Pending]:
        """(under the lock) the queued requests whose deadline has passed, taken out of the queues."""
        now, expired = time.perf_counter(), []
        while self._deadlines and self._deadlines[0][0] <= now:
            p = heapq.heappop(self._deadlines)[2]
            if self._queues.remove(p):
                expired.append(p)
        return expired

    def _settle(self, dropped: list[Pending], error: ServeError) -> None:
        """Fail requests taken out of the queue before they ran (timed out, or closed without draining)."""
        with self._cv:
            for p in dropped:
                stats = self._stats[p.served.name]
                stats.requests += 1
                stats.failures += 1
                stats.timeouts += isinstance(error, RequestTimeoutError)
            self._cv.notify_all()
        for p in dropped:
            if p.future.set_running_or_notify_cancel():
                p.future.set_exception(error)

    def _expire(self, p: Pending) -> None:
        """Fail `p`, taken out of its queue past its deadline."""
        timeout = p.deadline - p.request.arrival
        self._settle([p], RequestTimeoutError(
            f"request for model '{p.served.name}' waited {timeout:.3g} s in the queue (its timeout)"))


def failed(error: KilnError) -> Future:
    """A Future that already holds `error`."""
    f: Future = Future()
    f.set_exception(error)
    return f
