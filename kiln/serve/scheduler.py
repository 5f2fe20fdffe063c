"""The REEF-style dispatcher: real-time (RT) requests before best-effort (BE) ones, on CPU.

Three threads serve the queues (kiln.serve.queues):
- the RT lane runs RT requests in arrival order on the first cores of the pool (a model's `cores`,
  default the cores its code was built for, at most the scheduler's), once a BE run it preempted
  there has stopped (waiting at most BE_STOP_WAIT_S, on the pool itself: see "Hand-off" below);
- the BE lane runs BE requests round-robin over models, as preemptible runs (kiln.runtime.run_handle):
  when an RT request arrives, a BE run on cores it needs is cancelled and stops at the next chunk
  checkpoint of Kiln's pool (the preemption latency, RT arrival to the run returned preempted, goes
  into the BE model's stats); it resumes, losing at most its unfinished chunks, on the cores the RT
  work leaves idle (dynamic padding) or once the RT work is done, and is moved back to every core
  when the RT queue empties;
- a reaper fails requests still queued past their timeout.
Hand-off (RT arrival to RT running). The thread that submits an RT request cancels the BE run on
the cores it needs first thing, before its feeds are checked and before any lane thread wakes (a
malformed RT request costs the BE run a needless stop; it resumes at once). The RT lane then waits
on the run's pool block (`PreemptibleRun.wait_stopped`, the GIL released), which the pool wakes the
moment the BE kernels stopped: not on the BE lane's thread, which gets back into Python only when
the GIL lets it. The preemption latency is RT arrival to that moment (the pool's stamp); each
preemption's times (arrival, cancel issued, kernels stopped, BE back in Python, RT started) are kept
for `preemption_traces()`.
Models that cannot run preemptibly (symbolic shapes, graph executor) and batched runs use
`Model.run` on the lane's cores and are not preempted. With `fifo=True` one lane runs one queue in
arrival order and nothing is preempted: the baseline a server without priorities is.
"""

from __future__ import annotations

import collections
import copy
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kiln.errors import (
    ArtifactError,
    ServeError,
    UnknownModelError,
)
from kiln.runtime.thread_pool import Partition, running, runtime
from kiln.serve.admission import Admission
from kiln.serve.batching import run_batched
from kiln.serve.dispatch import InferRequest, ModelConfig, ModelStats, Priority
from kiln.serve.preemptible import preemptible, start_movable
from kiln.serve.queues import Pending
from kiln.serve.served import Served, served

if TYPE_CHECKING:
    from kiln.runtime.model import Model
    from kiln.runtime.pool_runs import PoolRuns
    from kiln.runtime.run_handle import PreemptibleRun


PREEMPT_SAMPLES = 100_000
# How long RT work waits for a cancelled BE run on its cores to stop before it runs beside it: a
# stopping run's last chunks and an RT run on the same cores slow each other down (measured on 2
# cores: the stop took 5x longer), but a run whose remaining steps launch nothing does not stop.
BE_STOP_WAIT_S = 0.001


@dataclass
class PreemptTrace:
    """One preemption's hand-off, on time.perf_counter's clock: the RT request's arrival, the cancel
    issued, the BE kernels stopped (the pool's stamp; None for a run without Kiln's pool), the BE run
    back in Python, the RT run started (None: the RT lane did not wait for this run)."""

    arrival: float
    cancelled: float = 0.0
    stopped: float | None = None
    returned: float | None = None
    rt_started: float | None = None


@dataclass(eq=False)
class _InFlight:
    """The BE run on the cores now; `trace`: the RT preemption that cancelled it."""

    run: PreemptibleRun
    partition: Partition
    want: int  # the cores its model may use: fewer is a padding that ends with the RT work
    trace: PreemptTrace | None = None
    cancelled: bool = False


class ReefScheduler(Admission):
    """A Dispatcher (kiln.serve.dispatch) over `cores` cores of Kiln's pool (default: all of them).
    Stats: a request refused for a full queue counts only as `refused`; one with bad feeds, timed out
    or dropped at close counts as a request and a failure."""

    def __init__(self, cores: int | None = None, fifo: bool = False):
        pool_cores = runtime().config.cores
        if cores is not None and (isinstance(cores, bool) or not isinstance(cores, int) or cores < 1):
            raise ServeError(f"scheduler cores={cores!r}: expected a positive integer")
        super().__init__(fifo)
        self.cores = min(cores or pool_cores, pool_cores)
        self._running: collections.Counter[str] = collections.Counter()
        self._rt_cores = 0  # cores RT work holds or is about to (0: none)
        self._be: _InFlight | None = None
        self._preempt_lock = threading.Lock()  # one cancel per BE run, from whichever thread comes first
        self._preempt_s: collections.deque[float] = collections.deque(maxlen=PREEMPT_SAMPLES)
        self._traces: collections.deque[PreemptTrace] = collections.deque(maxlen=PREEMPT_SAMPLES)
        lanes = [self._be_lane] if fifo else [self._rt_lane, self._be_lane]
        self._threads = [threading.Thread(target=f, name=f"kiln-serve-{f.__name__[1:]}", daemon=True)
                         for f in [*lanes, self._reaper]]
        for t in self._threads:
            t.start()

    def add(self, name: str, model: Model, config: ModelConfig) -> None:
        entry = served(name, model, config)
        with self._cv:
            self._served[name] = entry
            self._stats.setdefault(name, ModelStats())

    def remove(self, name: str) -> None:
        """Blocks until the model's queued and running requests are done."""
        with self._cv:
            if self._served.pop(name, None) is None:
                raise UnknownModelError(f"no model named '{name}' is served")
            self._cv.wait_for(lambda: not self._queues.queued(name) and not self._running[name])

    def ready(self, name: str) -> bool:
        with self._cv:
            return name in self._served

    def submit(self, request: InferRequest) -> Future:
        # NOTE: first, without the scheduler's lock (a lane may hold it; one dict read is atomic): an
        # RT request stops the BE run on its cores before anything else happens
        early = self._served.get(request.model)
        if early is not None and not self.fifo and early.priority(request) is Priority.RT:
            self._preempt(self._cores_of(early), request.arrival)
        return super().submit(request)

    def _queued(self, p: Pending) -> None:
        if p.priority is Priority.RT and not self.fifo:
            self._claim_rt(self._cores_of(p.served), p.request.arrival)

    def preemption_latencies(self) -> list[float]:
        """Seconds from RT arrival to the BE run stopped, for the last PREEMPT_SAMPLES preemptions
        (ModelStats has them only in histogram buckets, too coarse for a p99 of microseconds)."""
        with self._cv:
            return list(self._preempt_s)

    def preemption_traces(self) -> list[PreemptTrace]:
        """The hand-offs of the last PREEMPT_SAMPLES preemptions (see PreemptTrace)."""
        with self._cv:
            return [copy.copy(t) for t in self._traces]

    def close(self, drain: bool = True) -> None:
        self._stop_admitting(drain)
        for t in self._threads:
            if t is not threading.current_thread():
                t.join()

    # -- the RT lane ---------------------------------------------------------------------------

    def _rt_lane(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._queues.has_rt() or self._closed)
                first = self._queues.pop_rt()
                if first is None:
                    return
                late = _late(first)
                if not late:
                    cores = self._cores_of(first.served)
                    self._claim_rt(cores, time.perf_counter())  # arrival counted from here: it waited for RT work
                    batch = self._gather(first)
                    be = self._be if self._be_on(cores) else None
            if late:
                self._expire(first)
            else:
                if be is not None:
                    be.run.wait_stopped(BE_STOP_WAIT_S)
                    if be.trace is not None:
                        be.trace.rt_started = time.perf_counter()
                self._run_plain(batch, Partition(0, cores))
            with self._cv:
                if not self._queues.has_rt():
                    self._rt_cores = 0
                    self._grow_be()
                self._cv.notify_all()

    def _be_on(self, cores: int) -> bool:
        """(under the lock) a preemptible BE run is on one of cores [0, cores)."""
        return self._be is not None and self._be.partition.first < cores

    def _claim_rt(self, cores: int, arrival: float) -> None:
        """(under the lock) RT work needs cores [0, cores) from `arrival` on: cancel a BE run on any of them."""
        self._rt_cores = max(self._rt_cores, cores)
        self._preempt(self._rt_cores, arrival)

    def _preempt(self, cores: int, arrival: float) -> None:
        """Cancel the BE run in flight if it is on one of cores [0, cores), for an RT request that
        arrived at `arrival`. Any thread, with or without the scheduler's lock: the first call for a
        run cancels it, later ones do nothing (a second cancel would stop its next resume at once)."""
        with self._preempt_lock:
            be = self._be
            if be is None or be.partition.first >= cores or be.trace is not None:
                return
            be.trace = PreemptTrace(arrival)
            if not be.cancelled:
                be.cancelled = True
                be.run.cancel()
            be.trace.cancelled = time.perf_counter()

    def _grow_be(self) -> None:
        """(under the lock, RT idle) a BE run padded onto fewer cores is stopped to resume on all of its own."""
        with self._preempt_lock:
            be = self._be
            if be is not None and not be.cancelled and be.partition.cores < be.want:
                be.cancelled = True
                be.run.cancel()

    # -- the BE lane (every request in FIFO mode) ----------------------------------------------

    def _be_lane(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: (self._queues.has_be() and self._be_partition() is not None)
                                  or (self._closed and not self._queues.has_be()))
                first = self._queues.pop_be()
                if first is None:
                    return
                late = _late(first)
                if not late:
                    batch = self._gather(first)
                    part = self._be_partition()
            if late:
                self._expire(first)
            elif self.fifo or len(batch) > 1 or not preemptible(first.served.model):
                self._run_plain(batch, part)
            else:
                self._run_preemptible(batch[0], part)

    def _be_partition(self) -> Partition | None:
        """(under the lock) the cores BE work may use now: those RT work leaves (None: none)."""
        if self.fifo:
            return Partition(0, self.cores)
        if self._rt_cores >= self.cores:
            return None
        return Partition(self._rt_cores, self.cores - self._rt_cores)

    def _run_preemptible(self, p: Pending, part: Partition) -> None:
        """Run `p` to its end, stopping whenever RT work takes its cores and resuming where it stopped
        (`part`: where it runs if its library cannot run preemptibly after all)."""
        if not self._begin([p]):
            return
        stats, start = self._stats[p.served.name], time.perf_counter()
        try:
            run, control = start_movable(p.served.model, p.feeds)
        except ArtifactError:  # a library compiled before kiln_model_run_from
            self._run_plain([p], part, begun=True)
            return
        except Exception as e:  # noqa: BLE001 - see _finish
            self._finish([p], start, error=e)
            return
        try:
            while True:
                flight, result = self._place(run, control, p.served), None
                try:
                    result = run.run()
                finally:
                    self._landed(flight, result is not None and result.preempted, stats)
                if not result.preempted:
                    break
        except Exception as e:  # noqa: BLE001 - see _finish
            run.close()
            self._finish([p], start, error=e)
            return
        self._finish([p], start, outputs=[result.outputs])

    def _place(self, run: PreemptibleRun, control: PoolRuns | None, entry: Served) -> _InFlight:
        """Wait for cores RT work leaves, point the run's control at them, and make it the BE run in flight."""
        with self._cv:
            self._cv.wait_for(lambda: self._be_partition() is not None)
            part = self._be_partition()
            cores = min(part.cores, self._cores_of(entry))
            part = Partition(part.first, cores)
            if control is not None:
                control.partition = part
            with self._preempt_lock:
                self._be = _InFlight(run, part, self._cores_of(entry))
            return self._be

    def _landed(self, flight: _InFlight, preempted: bool, stats: ModelStats) -> None:
        """The run returned: count an RT preemption and its latency (to when its kernels stopped)."""
        now = time.perf_counter()
        trace = flight.trace
        if preempted and trace is not None:
            trace.returned, trace.stopped = now, flight.run.wait_stopped(0.0)
        with self._cv:
            with self._preempt_lock:
                self._be = None
            self._cv.notify_all()
            if preempted and trace is not None:
                latency = max(0.0, (trace.stopped or now) - trace.arrival)
                stats.preemptions += 1
                stats.preempt_latency_s.observe(latency)
                self._preempt_s.append(latency)
                self._traces.append(trace)

    # -- shared ------------------------------------------------------------------------------

    def _cores_of(self, entry: Served) -> int:
        """The cores a model's runs take: its config's, else those its code was built for (a model
        built for one core has serial kernels, and RT work on it leaves the other cores to BE)."""
        return max(1, min(entry.config.cores or entry.model.target.cores, self.cores))

    def _gather(self, first: Pending) -> list[Pending]:
        """(under the lock) `first` and, for a batchable model, the requests that join its batch
        within its batch delay, up to max_batch rows; each counted running once out of its queue
        (so that `remove` waits for it)."""
        name = first.served.name
        self._running[name] += 1
        if not first.served.batchable:
            return [first]
        config, batch, rows = first.served.config, [first], first.rows
        until = first.request.arrival + config.batch_delay_us * 1e-6
        while True:
            more = self._queues.take_batch(first, config.max_batch - rows)
            self._running[name] += len(more)
            batch += more
            rows += sum(p.rows for p in more)
            left = until - time.perf_counter()
            if rows >= config.max_batch or left <= 0 or self._closed:
                return batch
            self._cv.wait(left)

    def _run_plain(self, batch: list[Pending], part: Partition, begun: bool = False) -> None:
        """Run `batch` (one request or a dynamic batch) with Model.run on `part`: not preemptible."""
        if not begun:
            batch = self._begin(batch)
            if not batch:
                return
        start = time.perf_counter()
        try:
            with running(Partition(part.first, min(part.cores, self._cores_of(batch[0].served)))):
                outputs = run_batched(batch[0].served.model, [p.feeds for p in batch])
        except Exception as e:  # noqa: BLE001 - see _finish
            self._finish(batch, start, error=e)
            return
        self._finish(batch, start, outputs=outputs)

    def _begin(self, batch: list[Pending]) -> list[Pending]:
        """The requests of `batch` whose clients did not cancel them, marked running (the lane
        counted them running when it took them, so that `remove` waits for them)."""
        live = [p for p in batch if p.future.set_running_or_notify_cancel()]
        now = time.perf_counter()
        with self._cv:
            for p in batch:
                if p in live:
                    self._stats[p.served.name].queue_s.observe(now - p.request.arrival)
                else:
                    self._running[p.served.name] -= 1
            self._cv.notify_all()
        return live

    def _finish(self, batch: list[Pending], start: float, outputs: list[list[Any]] | None = None,
                error: Exception | None = None) -> None:
        """Count the runs and complete the futures of requests that `_begin` marked running.
        NOTE: runs catch every exception and hand it to `error`: a lane thread that died on an
        unexpected one would leave every later request unanswered."""
        seconds = time.perf_counter() - start
        with self._cv:
            stats = self._stats[batch[0].served.name]
            stats.compute_s.observe(seconds)
            stats.batch_sizes.observe(sum(p.rows for p in batch) if batch[0].served.batchable else 1)
            for p in batch:
                stats.requests += 1
                stats.failures += error is not None
                self._running[p.served.name] -= 1
            self._cv.notify_all()
        for i, p in enumerate(batch):
            if error is not None:
                p.future.set_exception(error)
            else:
                p.future.set_result(p.served.answer(p.request, outputs[i]))

    def _reaper(self) -> None:
        """Fail requests still queued at their deadline."""
        while True:
            with self._cv:
                if self._closed and not self._queues:
                    return
                expired = self._expired()
                if not expired:
                    wait = self._deadlines[0][0] - time.perf_counter() if self._deadlines else None
                    self._cv.wait(wait)
                    continue
            for p in expired:
                self._expire(p)


def _late(p: Pending) -> bool:
    """Its deadline passed while it was queued (the reaper had not got to it yet)."""
    return p.deadline is not None and p.deadline <= time.perf_counter()

