"""The controller of a pipeline on Ray's compiled graphs: the same stage actors, one graph compiled once.

A compiled graph (ray.dag, `experimental_compile`; a beta API) replaces each actor call by a
shared-memory channel between the processes that the graph sets up once, which removes most of a
classic call's cost. One thread owns the graph (its calls are not for several threads): it keeps
up to `max_inflight` executions submitted and takes their results in order, which a pipeline
returns them in. Results are copied out of the graph's output buffers, which stay
taken while an array read from them lives (holding them would stall the graph after
`max_inflight` answers). A compiled graph does not survive an actor's death, so here a dead actor fails the
requests in flight with a DistributedError and the pipeline with them (classic actors retry instead).
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
    """Requests through `dag` (compile_chain's), each answered within `timeout_s`."""

    def __init__(self, ray: Any, dag: Any, timeout_s: float, max_inflight: int) -> None:
        self._ray = ray
        self._dag = dag
        self._timeout_s = timeout_s
        self._max_inflight = max_inflight
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
            while not self._stopped and self._broken is None and len(inflight) < self._max_inflight:
                try:
                    request = self._queue.get(timeout=POLL_S) if not inflight else self._queue.get_nowait()
                except queue.Empty:
                    break
                inflight.append((request, self._dag.execute(request.feeds)))
            if inflight:
                self._settle(*inflight.popleft())
            if self._broken is not None:
                self._fail_all(inflight, DistributedError(f"the pipeline's compiled graph broke: {self._broken}"))
                return
        self._fail_all(inflight, DistributedError("the pipeline was closed before this request finished"))

    def _settle(self, request: Request, ref: Any) -> None:
        try:
            got = self._ray.get(ref, timeout=max(0.0, request.deadline - time.monotonic()))
            result = request.finish({name: np.array(v) for name, v in got.items()})
        except self._ray.exceptions.RayChannelError as e:  # an actor of the graph died, or the graph timed out
            self._broken = e
            self._fail(request, DistributedError(f"the pipeline's compiled graph broke: {e}"))
            return
        except Exception as e:
            self._fail(request, e)
            return
        request.future.set_result(result)
        self.stats["answered"] += 1

    def _fail_all(self, inflight: deque[tuple[Request, Any]], error: DistributedError) -> None:
        while inflight:
            self._fail(inflight.popleft()[0], error)
        while True:
            try:
                self._fail(self._queue.get_nowait(), error)
            except queue.Empty:
                return

    def _fail(self, request: Request, error: BaseException) -> None:
        request.future.set_exception(error)
        self.stats["failed"] += 1
