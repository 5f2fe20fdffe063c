"""A test double of the Dispatcher seam: each request runs model.run on a thread of a small pool, with
the model's queue limit and the request's timeout honoured. It lets the HTTP front end be tested
without the real scheduler (kiln.serve.scheduler), which another part of issue 28 builds."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

from kiln.errors import QueueFullError, RequestTimeoutError, UnknownModelError
from kiln.serve.dispatch import InferRequest, ModelConfig, ModelStats


class ThreadDispatcher:
    """Runs requests in arrival order on `workers` threads; `gate`, while cleared, holds every run back
    (so that tests can fill a queue or keep requests in flight)."""

    def __init__(self, workers: int = 2) -> None:
        self.pool = ThreadPoolExecutor(workers)
        self.gate = threading.Event()
        self.gate.set()
        self.models: dict = {}
        self.pending: dict[str, int] = {}
        self._stats: dict[str, ModelStats] = {}
        self.lock = threading.Lock()

    def add(self, name: str, model, config: ModelConfig) -> None:
        with self.lock:
            self.models[name] = (model, config)
            self.pending.setdefault(name, 0)
            self._stats.setdefault(name, ModelStats())

    def remove(self, name: str) -> None:
        with self.lock:
            self.models.pop(name, None)

    def ready(self, name: str) -> bool:
        with self.lock:
            return name in self.models

    def submit(self, request: InferRequest) -> Future:
        with self.lock:
            if request.model not in self.models:
                return _failed(UnknownModelError(f"unknown model '{request.model}'"))
            model, config = self.models[request.model]
            if self.pending[request.model] >= config.queue_limit:
                self._stats[request.model].refused += 1
                return _failed(QueueFullError(f"model '{request.model}' has {config.queue_limit} queued requests"))
            self.pending[request.model] += 1
        return self.pool.submit(self._run, request, model, request.timeout_s or config.timeout_s)

    def _run(self, request: InferRequest, model, timeout_s: float | None) -> dict:
        stats = self._stats[request.model]
        try:
            self.gate.wait()
            start = time.perf_counter()
            stats.queue_s.observe(start - request.arrival)
            if timeout_s is not None and start - request.arrival > timeout_s:
                stats.timeouts += 1
                raise RequestTimeoutError(f"request to '{request.model}' waited past its timeout of {timeout_s} s")
            outs = dict(zip([o.name for o in model.outputs], model.run(request.feeds)))
            stats.compute_s.observe(time.perf_counter() - start)
            stats.batch_sizes.observe(1)
            return {k: outs[k] for k in request.outputs or outs}
        except Exception:
            stats.failures += 1
            raise
        finally:
            with self.lock:
                self.pending[request.model] -= 1
                stats.requests += 1

    def stats(self) -> dict[str, ModelStats]:
        return dict(self._stats)

    def close(self, drain: bool = True) -> None:
        self.gate.set()
        self.pool.shutdown(wait=drain, cancel_futures=not drain)


def _failed(error: Exception) -> Future:
    f: Future = Future()
    f.set_exception(error)
    return f
