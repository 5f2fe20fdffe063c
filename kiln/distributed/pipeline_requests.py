"""The single controller of a pipeline on classic actors: each request is one chain of actor calls.

The caller's thread submits stage 0's call and each next stage's call on the previous call's
ObjectRef, all at once, so Ray moves the values between actors and many requests are in flight;
the driver waits only on the last ref. One watcher thread owns every request's Future and is the
only code that completes one, exactly once. A chain that fails because an actor died or is
restarting (or a value was lost with it) is submitted again from stage 0 after a short backoff,
until the request's deadline; the chain's last ref carries the first failure along the chain, so a
request never has two chains alive. An error the stage itself raised (bad feeds) fails the request.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kiln.errors import DistributedError

POLL_S = 0.05  # how long the watcher blocks in one ray.wait before looking at deadlines and retries
BACKOFF_S = (0.02, 1.0)  # first and longest wait before a failed chain is submitted again

Values = dict[str, np.ndarray]


@dataclass(eq=False)
class Request:
    feeds: Mapping[str, np.ndarray]
    finish: Callable[[Values], Any]
    future: Future
    deadline: float
    failures: int = 0
    deaths: int = 0  # failures where an actor died (not merely restarting)
    number: int = field(default_factory=itertools.count().__next__)


class ChainController:
    """Requests through `actors` (StageWorker actors in stage order); each answered within `timeout_s`,
    and given up once it has seen more actor deaths than an actor has restarts (`max_restarts`)."""

    def __init__(self, ray: Any, actors: Sequence[Any], timeout_s: float, max_restarts: int) -> None:
        self._ray = ray
        self._actors = list(actors)
        self._timeout_s = timeout_s
        self._max_deaths = max_restarts + 1
        self._lock = threading.Lock()
        self._pending: dict[Any, Request] = {}  # the last ref of each request's live chain
        self._waiting: list[tuple[float, Request]] = []  # failed chains, submitted again at their time
        self._wake = threading.Event()
        self._stopped = False
        self._broken: BaseException | None = None
        self.stats = {"answered": 0, "failed": 0, "resubmitted": 0}
        self._thread = threading.Thread(target=self._watch, name="kiln-pipeline-controller", daemon=True)
        self._thread.start()

    def submit(self, feeds: Mapping[str, np.ndarray], finish: Callable[[Values], Any]) -> Future:
        """A Future of `finish(values)`, where `values` are the last stage's results for `feeds`."""
        if self._broken is not None:
            raise DistributedError(f"the pipeline's cluster connection was lost: {self._broken}")
        if self._stopped:
            raise DistributedError("the pipeline is closed")
        request = Request(feeds, finish, Future(), time.monotonic() + self._timeout_s)
        request.future.set_running_or_notify_cancel()
        self._launch(request)
        self._wake.set()
        return request.future

    def stop(self) -> None:
        """Stop the watcher; every request still open fails with a DistributedError."""
        self._stopped = True
        self._wake.set()
        self._thread.join()
        with self._lock:
            left = [*self._pending.values(), *(r for _, r in self._waiting)]
            self._pending.clear()
            self._waiting.clear()
        for request in left:
            self._fail(request, DistributedError("the pipeline was closed before this request finished"))

    def _launch(self, request: Request) -> None:
        ref = request.feeds
        for actor in self._actors:
            ref = actor.step.remote(ref)
        with self._lock:
            self._pending[ref] = request

    def _watch(self) -> None:
        while not self._stopped:
            with self._lock:
                refs = list(self._pending)
            if not refs:
                self._wake.wait(POLL_S)
                self._wake.clear()
            else:
                try:
                    ready, _ = self._ray.wait(refs, num_returns=1, timeout=POLL_S, fetch_local=False)
                    if ready:
                        ready, _ = self._ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)
                except Exception as e:  # the connection to the cluster is gone: nothing can be answered
                    self._lose_cluster(e)
                    return
                for ref in ready:
                    self._settle(ref)
            self._expire_and_retry()

    def _settle(self, ref: Any) -> None:
        with self._lock:
            request = self._pending.pop(ref)
        try:
            values = self._ray.get(ref, timeout=self._timeout_s)
        except (self._ray.exceptions.RayActorError, self._ray.exceptions.ObjectLostError) as e:
            self._retry(request, e)
            return
        except Exception as e:
            self._fail(request, e)
            return
        try:
            result = request.finish(values)
        except Exception as e:
            self._fail(request, e)
            return
        request.future.set_result(result)
        self.stats["answered"] += 1

    def _retry(self, request: Request, error: BaseException) -> None:
        request.failures += 1
        request.deaths += isinstance(error, self._ray.exceptions.ActorDiedError)
        if request.deaths > self._max_deaths or time.monotonic() >= request.deadline:
            self._fail(request, DistributedError(f"request {request.number} lost its stage actors {request.failures} "
                                                 f"time(s) ({request.deaths} death(s), beyond their restarts or its "
                                                 f"{self._timeout_s:g} s): {error}"))
            return
        delay = min(BACKOFF_S[0] * 2 ** (request.failures - 1), BACKOFF_S[1])
        with self._lock:
            self._waiting.append((time.monotonic() + delay, request))

    def _expire_and_retry(self) -> None:
        now = time.monotonic()
        with self._lock:
            due = [r for at, r in self._waiting if at <= now]
            self._waiting = [(at, r) for at, r in self._waiting if at > now]
            late = [(ref, r) for ref, r in self._pending.items() if r.deadline <= now]
            for ref, _ in late:
                del self._pending[ref]
        for _, request in late:
            self._fail(request, DistributedError(f"request {request.number} got no answer within {self._timeout_s:g} s "
                                                 "(a stage is stuck, or the cluster lost its nodes)"))
        for request in due:
            self.stats["resubmitted"] += 1
            try:
                self._launch(request)
            except Exception as e:
                self._fail(request, e)

    def _lose_cluster(self, error: BaseException) -> None:
        self._broken = error
        with self._lock:
            left = [*self._pending.values(), *(r for _, r in self._waiting)]
            self._pending.clear()
            self._waiting.clear()
        for request in left:
            self._fail(request, DistributedError(f"the pipeline's cluster connection was lost: {error}"))

    def _fail(self, request: Request, error: BaseException) -> None:
        request.future.set_exception(error)
        self.stats["failed"] += 1
