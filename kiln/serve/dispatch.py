"""The seam between the HTTP front end and what runs the requests.

The front end (kiln.serve.app) parses a request into an `InferRequest` and hands it to a
`Dispatcher`; the dispatcher queues it, runs it on a model and completes its Future with the
outputs, or with a KilnError that names what went wrong. Two dispatchers implement the seam: a
FIFO queue per model (the baseline a server without priorities is) and the REEF-style scheduler
(real-time before best-effort, best-effort preempted at kernel checkpoints). Both fill the same
`ModelStats`, which /metrics renders, so the front end never knows which one runs.
"""

from __future__ import annotations

import enum
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np

    from kiln.runtime.model import Model


class Priority(enum.Enum):
    """Real-time requests run first and preempt best-effort work; best-effort share what is left."""

    RT = "rt"
    BE = "be"


@dataclass(frozen=True)
class ModelConfig:
    """A served model's settings, from its config file in the repository (defaults otherwise)."""

    priority: Priority = Priority.BE
    cores: int | None = None  # cores its runs may use; None: every core
    max_batch: int = 0  # 0: no dynamic batching; else the largest batch (symbolic batch dimension only)
    batch_delay_us: int = 0  # how long a batch may wait for more requests
    queue_limit: int = 64  # queued requests beyond this are refused (503)
    timeout_s: float | None = None  # a request still queued after this fails (the request may set a shorter one)
    replicas: int = 1  # copies of the model on Ray actors (`kiln serve --ray`); one process serves one copy


@dataclass
class InferRequest:
    """One inference: `feeds` by input name; `outputs` to return (None: all); `priority` and
    `timeout_s` override the model's when set. `arrival` is when the front end received it."""

    model: str
    feeds: dict[str, np.ndarray]
    outputs: list[str] | None = None
    priority: Priority | None = None
    timeout_s: float | None = None
    arrival: float = field(default_factory=time.perf_counter)


LATENCY_BUCKETS_S = (25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3,
                     250e-3, 500e-3, 1.0, 2.5)


@dataclass
class Histogram:
    """Cumulative counts per upper bound, as Prometheus histograms are."""

    bounds: tuple[float, ...] = LATENCY_BUCKETS_S
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    n: int = 0

    def __post_init__(self) -> None:
        self.counts = self.counts or [0] * len(self.bounds)

    def observe(self, value: float) -> None:
        self.n += 1
        self.total += value
        for i, b in enumerate(self.bounds):
            if value <= b:
                self.counts[i] += 1


@dataclass
class ModelStats:
    """What a dispatcher counts per model (monotonic; read by /metrics)."""

    requests: int = 0  # completed, successfully or not
    failures: int = 0
    refused: int = 0  # queue full
    timeouts: int = 0
    queue_s: Histogram = field(default_factory=Histogram)  # arrival to start of its run
    compute_s: Histogram = field(default_factory=Histogram)  # start to end of its run (preempted time included)
    batch_sizes: Histogram = field(default_factory=lambda: Histogram(bounds=(1, 2, 4, 8, 16, 32, 64, 128)))
    preemptions: int = 0  # times a run of this model was stopped for real-time work
    preempt_latency_s: Histogram = field(default_factory=Histogram)  # RT arrival to this model's run stopped


class Dispatcher(Protocol):
    """Runs requests for named models; thread-safe; `submit` never blocks on a model's run."""

    def add(self, name: str, model: Model, config: ModelConfig) -> None:
        """Serve `model` as `name` (replacing a model of that name once its queued requests finish)."""

    def remove(self, name: str) -> None:
        """Stop serving `name`: queued and running requests finish first; later ones fail (unknown model)."""

    def ready(self, name: str) -> bool:
        """`name` is served and can run requests now (with `kiln serve --ray`: one of its replicas is up)."""

    def submit(self, request: InferRequest) -> Future:
        """Queue `request`; the Future gets {output name: array} or an error (QueueFullError when the
        model's queue is at its limit, RequestTimeoutError past its timeout, InputError for bad feeds)."""

    def stats(self) -> dict[str, ModelStats]:
        """Counters per model name."""

    def close(self, drain: bool = True) -> None:
        """Stop taking requests; with `drain` finish every queued one first, else fail them."""
