"""The controller of a pipeline on Ray's compiled graphs: the same stage actors, one graph compiled once.

A compiled graph (ray.dag, `experimental_compile`; a beta API) replaces each actor call by a
shared-memory channel between the processes that the graph sets up once, which removes most of a
classic call's cost. One thread owns the graph (its calls are not for several threads): it keeps
up to `max_inflight` executions submitted and takes their results in order, which a pipeline
returns them in. Results are copied out of the graph's output buffers, which stay
taken while an array read from them lives (holding them would stall the graph after
`max_inflight` answers). A compiled graph does not survive an actor's death: the graph is made again over
the restarted actors and the requests that were in it are executed again, from stage 0.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np

from kiln.distributed.pipeline_requests import POLL_S, Request, Values
from kiln.errors import DistributedError


def compile_chain(actors: Sequence[Any], max_inflight: int, timeout_s: float) -> Any:
    """The compiled graph input -> stage 0 -> ... -> last stage, whose submissions wait up to `timeout_s`
    (the first sets up the channels: seconds on a loaded machine); a DistributedError where Ray has none."""
    try:
        from ray.dag import InputNode
    except ImportError as e:
        raise DistributedError(f"this Ray has no compiled graphs (ray.dag): {e}; use compiled_graph=False") from e
    with InputNode() as source:
        node = source
        for actor in actors:
            node = actor.step.bind(node)
    if not hasattr(node, "experimental_compile"):
        raise DistributedError("this Ray's graphs cannot be compiled (no experimental_compile); "
                               "use compiled_graph=False")
    return node.experimental_compile(_max_inflight_executions=max_inflight, _submit_timeout=timeout_s)


class CompiledController:
    """Requests through the graph `compile()` makes of `actors`, each answered within `timeout_s`. When the
    graph breaks (an actor died), it is torn down, made again once Ray has restarted the actor, and the
    requests that were in it are executed again; more breaks than `max_restarts` fail the pipeline."""

    def __init__(self, ray: Any, compile: Callable[[], Any], actors: Sequence[Any], timeout_s: float,
                 max_inflight: int, max_restarts: int) -> None:
        self._ray = ray
        self._compile = compile
        self._actors = list(actors)
        self._dag = compile()
        self._timeout_s = timeout_s
        self._max_inflight = max_inflight
        self._breaks_left = max_restarts
        self._breaks = (ray.exceptions.RayChannelError, ray.exceptions.RayActorError)
        self._held: list[Request] = []  # taken from the queue, or caught in a break: not in the graph
        self._queue: queue.Queue[Request] = queue.Queue()
        self._stopped = False
        self._broken: BaseException | None = None
        self.stats = {"answered": 0, "failed": 0, "resubmitted": 0}
        self._thread = threading.Thread(target=self._loop, name="kiln-pipeline-compiled", daemon=True)
        self._thread.start()

    def submit(self, feeds: Mapping[str, np.ndarray], finish: Callable[[Values], Any]) -> Future:
        """A Future of `finish(values)`, where `values` are the last stage's results for `feeds`."""
        if self._broken is not None:
            raise DistributedError(f"the pipeline's compiled graph broke: {self._broken}")
        if self._stopped:
            raise DistributedError("the pipeline is closed")
        request = Request(feeds, finish, Future(), time.monotonic() + self._timeout_s)
        request.future.set_running_or_notify_cancel()
        self._queue.put(request)
        return request.future

    def stop(self) -> None:
        """Stop the graph's thread and tear the graph down; requests still open fail."""
        self._stopped = True
        self._thread.join()
        self._dag.teardown()

    def _loop(self) -> None:
        inflight: deque[tuple[Request, Any]] = deque()
        while not self._stopped or inflight:
            try:
                self._fill(inflight)
                if inflight:
                    self._settle(*inflight[0])
                    inflight.popleft()
            except self._breaks as e:  # an actor of the graph died (or the graph timed out)
                again = [*(r for r, _ in inflight), *self._held]
                inflight.clear()
                if not self._rebuild(e, again):
                    self._held = []
                    self._fail_all(again, DistributedError(f"the pipeline's compiled graph broke: {e}"))
                    return
                self._held = again  # executed again first, from stage 0
                self.stats["resubmitted"] += len(again)
        self._fail_all(self._held, DistributedError("the pipeline was closed before this request finished"))

    def _fill(self, inflight: deque[tuple[Request, Any]]) -> None:
        """Execute requests (those held back by a break first) until `max_inflight` are in the graph."""
        while not self._stopped and len(inflight) < self._max_inflight:
            if not self._held:
                try:
                    self._held.append(self._queue.get(timeout=POLL_S) if not inflight else self._queue.get_nowait())
                except queue.Empty:
                    return
            inflight.append((self._held[0], self._dag.execute(self._held[0].feeds)))
            self._held.pop(0)

    def _settle(self, request: Request, ref: Any) -> None:
        """Complete `request` from `ref`; a break of the graph is raised, leaving the request open."""
        try:
            got = self._ray.get(ref, timeout=max(0.0, request.deadline - time.monotonic()))
            result = request.finish({name: np.array(v) for name, v in got.items()})
        except self._breaks:
            raise
        except Exception as e:
            self._fail(request, e)
            return
        request.future.set_result(result)
        self.stats["answered"] += 1

    def _rebuild(self, error: BaseException, waiting: Sequence[Request]) -> bool:
        """A new graph over the restarted actors, ready before the earliest deadline of `waiting`; False
        (the pipeline broken) when the restarts are used up, an actor does not come back, or it fails."""
        self._breaks_left -= 1
        if self._breaks_left < 0:
            self._broken = error
            return False
        deadline = min(r.deadline for r in waiting)
        try:
            self._dag.teardown()
            for actor in self._actors:
                self._wait_alive(actor, deadline)
            self._dag = self._compile()
        except Exception as e:
            self._broken = e
            return False
        return True

    def _wait_alive(self, actor: Any, deadline: float) -> None:
        """Return once `actor` answers (Ray restarts a dead one); raise past `deadline`."""
        while True:
            try:
                self._ray.get(actor.info.remote(), timeout=max(0.0, deadline - time.monotonic()))
                return
            except self._ray.exceptions.ActorUnavailableError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(POLL_S)

    def _fail_all(self, requests: Sequence[Request], error: DistributedError) -> None:
        for request in requests:
            self._fail(request, error)
        while True:
            try:
                self._fail(self._queue.get_nowait(), error)
            except queue.Empty:
                return

    def _fail(self, request: Request, error: BaseException) -> None:
        request.future.set_exception(error)
        self.stats["failed"] += 1
