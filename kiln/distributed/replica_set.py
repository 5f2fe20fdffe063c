"""N replicas of one compiled model on Ray actors, each request sent to the least-loaded one.

The replicas are ModelWorker actors in one placement group (their cores reserved at once, one bundle
per replica, spread over nodes where the cluster has several). A request goes to the replica with
the fewest calls in flight (ties round-robin) and completes its own Future exactly once:
- an actor that dies is restarted by Ray (`max_restarts`) while the calls it had in flight are sent
  again, to the least-loaded other replica (to the restarted one when it is the only one), each request
  at most `max_attempts` times (a request that crashes its replica must not take down all); an answer
  that arrives for an attempt already replaced or failed is dropped, so no request is answered twice;
- a call unanswered after `call_timeout_s` (the cluster gone, a node lost) fails its request with a
  DistributedError instead of leaving its caller waiting for ever.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kiln.distributed import bundle as bundles
from kiln.distributed.model_worker import ModelWorker
from kiln.distributed.ray_env import connect
from kiln.distributed.replica_loads import Loads
from kiln.errors import DistributedError

if TYPE_CHECKING:
    from kiln.runtime.model import Model

START_TIMEOUT_S = 120.0  # placement and loading of every replica (a big library is unpacked and mapped)
CALL_TIMEOUT_S = 60.0
# Tries of one request: a replica lost once is survived, but a request that itself crashes the process
# running it (a poison request) takes down at most this many replicas before it fails.
MAX_ATTEMPTS = 3
WATCH_PERIOD_S = 0.25
PROBE_PERIOD_S = 0.2
PROBES_DIED = 3


@dataclass(eq=False)
class Call:
    """One request and its latest attempt; `done` once its Future is completed (under the set's lock)."""

    feeds: dict[str, np.ndarray]
    output_names: list[str] | None
    capped: bool
    future: Future = field(default_factory=Future)
    attempts: int = 0
    replica: int = -1
    sent: float = 0.0  # time.monotonic() of the latest attempt
    done: bool = False


def as_bundle(model: bundles.Bundle | str | os.PathLike | Model) -> bundles.Bundle:
    """The bundle of a compiled directory, of a loaded or built model (exported to a scratch directory), or as given."""
    if isinstance(model, dict):
        return model
    if isinstance(model, (str, os.PathLike)):
        return bundles.pack(model)
    scratch = Path(tempfile.mkdtemp(prefix="kiln-replica-"))
    try:
        return bundles.pack(model.export(scratch / "model"))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


class ReplicaSet:
    """`replicas` copies of a model, each on its own actor with `threads` cores (1 when None)."""

    def __init__(self, model: bundles.Bundle | str | os.PathLike | Model, replicas: int = 1,
                 threads: int | None = None, address: str | None = None, max_restarts: int = 3,
                 call_timeout_s: float = CALL_TIMEOUT_S, start_timeout_s: float = START_TIMEOUT_S,
                 max_attempts: int = MAX_ATTEMPTS, name: str = "model") -> None:
        _check_settings(replicas, threads, max_restarts, call_timeout_s, max_attempts)
        self.name, self.replicas, self.call_timeout_s = name, replicas, call_timeout_s
        self.start_timeout_s = start_timeout_s
        self.retries = 0  # attempts sent again after a replica was lost
        self.max_attempts = max_attempts
        self._ray = connect(address)
        self._lock = threading.Lock()
        self._loads = Loads(replicas)
        self._calls: set[Call] = set()
        self._closed = False
        self._group, self._actors = self._start(as_bundle(model), threads or 1, max_restarts)
        self._watcher = threading.Thread(target=self._watch, name=f"kiln-replicas-{name}", daemon=True)
        self._watcher.start()
        self.pids = self._wait_loaded()

    # -- the caller's side ---------------------------------------------------------------------

    def submit(self, feeds: dict[str, np.ndarray], output_names: list[str] | None = None,
               replica: int | None = None, capped: bool = False) -> Future:
        """Send one run; the Future gets {output name: array}. `replica`: where (else the least loaded);
        `capped`: counts in that replica's capped load (the server's best-effort requests)."""
        call = Call(feeds, output_names, capped)
        with self._lock:
            if self._closed:
                raise DistributedError(f"the replicas of '{self.name}' are closed")
            where = self._loads.least_loaded() if replica is None else replica
            if where is None:
                raise DistributedError(f"every replica of '{self.name}' is dead (out of restarts)")
            self._calls.add(call)
            self._reserve(call, where)
        self._send(call, where)
        return call.future

    def run_async(self, output_names: list[str] | None, feeds: dict[str, np.ndarray]) -> Future:
        """A session's run_async: the Future gets the outputs named (all when None) as a list."""
        out: Future = Future()

        def done(f: Future) -> None:
            try:
                named = f.result()
            except BaseException as e:  # noqa: BLE001 - handed to the caller's Future
                out.set_exception(e)
            else:
                out.set_result(list(named.values()))
        self.submit(feeds, output_names).add_done_callback(done)
        return out

    def run(self, output_names: list[str] | None, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """A session's run: the outputs named (all when None), in order."""
        return self.run_async(output_names, feeds).result()

    def free(self, limit: int, capped_limit: int | None = None) -> int | None:
        """The least-loaded live replica with fewer than `limit` calls in flight (and fewer than
        `capped_limit` capped ones); None when every one is that busy."""
        with self._lock:
            return self._loads.least_loaded(limit, capped_limit)

    def in_flight(self) -> list[int]:
        """Calls in flight on each replica."""
        with self._lock:
            return list(self._loads.flight)

    def up(self) -> int:
        """Replicas answering now (one that died counts again once its restart answers)."""
        with self._lock:
            return self._loads.up()

    def nodes(self) -> list[str]:
        """The Ray node id each replica was placed on (SPREAD: different nodes where the cluster has them)."""
        from ray.util.placement_group import placement_group_table

        placed = placement_group_table(self._group)["bundles_to_node_id"]
        return [placed[i] for i in range(self.replicas)]

    def dead(self) -> bool:
        """Every replica is out of restarts (a submit is a DistributedError)."""
        with self._lock:
            return self._loads.dead()

    def actor(self, replica: int) -> Any:
        """The Ray actor handle of one replica (for tests that kill it)."""
        return self._actors[replica]

    def close(self) -> None:
        """Fail what is still in flight, end the actors and free their cores."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            left = list(self._calls)
        for call in left:
            self._complete(call, error=DistributedError(f"the replicas of '{self.name}' were closed first"))
        for actor in self._actors:
            self._ray.kill(actor, no_restart=True)
        from ray.util.placement_group import remove_placement_group

        remove_placement_group(self._group)
        self._watcher.join()

    # -- starting ------------------------------------------------------------------------------

    def _start(self, bundle: bundles.Bundle, cpus: int, max_restarts: int) -> tuple[Any, list[Any]]:
        """The placement group (every replica's cores at once, or a DistributedError) and the actors in it."""
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        group = placement_group([{"CPU": cpus}] * self.replicas, strategy="SPREAD")
        try:
            self._ray.get(group.ready(), timeout=self.start_timeout_s)
        except self._ray.exceptions.GetTimeoutError:
            remove_placement_group(group)
            raise DistributedError(f"'{self.name}': the Ray cluster did not give {self.replicas} replica(s) of "
                                   f"{cpus} CPU(s) within {self.start_timeout_s:g} s (cluster CPUs: "
                                   f"{self._ray.cluster_resources().get('CPU', 0):g})") from None
        self._bundle_ref = self._ray.put(bundle)  # NOTE: kept alive: Ray restarts an actor from its arguments
        worker = self._ray.remote(ModelWorker)
        actors = [worker.options(num_cpus=cpus, max_restarts=max_restarts, max_task_retries=0,
                                 scheduling_strategy=PlacementGroupSchedulingStrategy(group, i)
                                 ).remote(self._bundle_ref, cpus, f"{self.name}-{i}")
                  for i in range(self.replicas)]
        return group, actors

    def _wait_loaded(self) -> list[int]:
        """Each replica's process id once it loaded the model; a DistributedError naming the one that failed."""
        pids = []
        for i, actor in enumerate(self._actors):
            try:
                pids.append(self._ray.get(actor.info.remote(), timeout=self.start_timeout_s)["pid"])
            except self._ray.exceptions.RayError as e:
                self.close()
                raise DistributedError(f"replica {i} of '{self.name}' failed to load its model: {e}") from None
        return pids

    # -- calls -----------------------------------------------------------------------------------

    def _reserve(self, call: Call, replica: int) -> None:
        """(under the lock) `call`'s next attempt goes to `replica`."""
        call.attempts += 1
        call.replica, call.sent = replica, time.monotonic()
        self._loads.add(replica, call.capped)

    def _send(self, call: Call, replica: int) -> None:
        attempt = call.attempts
        ref = self._actors[replica].run.remote(call.feeds, call.output_names)
        ref.future().add_done_callback(lambda f: self._landed(call, replica, attempt, f))

    def _landed(self, call: Call, replica: int, attempt: int, answer: Future) -> None:
        """An attempt's answer: the result, the model's own error, or a replica lost (then try again)."""
        with self._lock:
            self._loads.remove(replica, call.capped)
            current = not call.done and call.attempts == attempt
        try:
            result = answer.result()
        except self._ray.exceptions.RayTaskError as e:  # the model raised: the same feeds fail anywhere
            if current:
                self._complete(call, error=e.cause if isinstance(e.cause, Exception) else e)
            return
        except self._ray.exceptions.RayError as e:
            self._replica_lost(replica)
            if current:
                self._retry(call, e)
            return
        if current:
            self._complete(call, result=result)

    def _retry(self, call: Call, error: Exception) -> None:
        """Send `call` again to another replica, unless it was tried as often as replicas have lives."""
        with self._lock:
            where = self._loads.least_loaded(avoid=call.replica)
            again = where is not None and call.attempts < self.max_attempts and not self._closed and not call.done
            if again:
                self.retries += 1
                self._reserve(call, where)
        if again:
            self._send(call, where)
        else:
            self._complete(call, error=DistributedError(
                f"'{self.name}': a request failed on {call.attempts} replica attempt(s); the last: {error}"))

    def _replica_lost(self, replica: int) -> None:
        """Count `replica` down until Ray's restart of it answers again (or for good when it cannot)."""
        with self._lock:
            if not self._loads.mark_down(replica) or self._closed:
                return
        self._probe(replica, time.monotonic() + self.start_timeout_s)

    def _probe(self, replica: int, deadline: float, died: int = 0) -> None:
        """Ask a lost replica who it is until it answers (up again) or is dead for good. A restarting actor
        holds the call until it is back (or fails it as unavailable: asked again); a dead one fails it at
        once as died, and so may one in the moment it died: PROBES_DIED such answers in a row, or no
        answer by `deadline`, mean it is out of restarts."""
        def answered(f: Future) -> None:
            error = f.exception()
            if error is None:
                with self._lock:
                    self._loads.mark_up(replica)
                return
            now_died = died + 1 if isinstance(error, self._ray.exceptions.ActorDiedError) else 0
            if now_died >= PROBES_DIED or time.monotonic() > deadline:
                with self._lock:
                    self._loads.mark_dead(replica)
            elif not self._closed:
                again = threading.Timer(PROBE_PERIOD_S, self._probe, (replica, deadline, now_died))
                again.daemon = True
                again.start()
        self._actors[replica].info.remote().future().add_done_callback(answered)

    def _complete(self, call: Call, result: dict | None = None, error: Exception | None = None) -> None:
        """Complete `call`'s Future, once: later answers for it find it done and are dropped."""
        with self._lock:
            if call.done:
                return
            call.done = True
            self._calls.discard(call)
        if error is not None:
            call.future.set_exception(error)
        else:
            call.future.set_result(result)

    def _watch(self) -> None:
        """Fail calls unanswered past the timeout: a cluster that went away answers nothing."""
        while True:
            time.sleep(min(WATCH_PERIOD_S, self.call_timeout_s / 4))
            now = time.monotonic()
            with self._lock:
                if self._closed and not self._calls:
                    return
                late = [c for c in self._calls if now - c.sent > self.call_timeout_s]
            for call in late:
                self._complete(call, error=DistributedError(
                    f"'{self.name}': replica {call.replica} gave no answer within {self.call_timeout_s:g} s "
                    "(is the Ray cluster still there?)"))


def _check_settings(replicas: int, threads: int | None, max_restarts: int, call_timeout_s: float,
                    max_attempts: int) -> None:
    for what, value, low in (("replicas", replicas, 1), ("threads", threads, 1), ("max_restarts", max_restarts, 0),
                             ("max_attempts", max_attempts, 1)):
        if value is None and what == "threads":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise DistributedError(f"{what}={value!r}: expected an integer >= {low}")
    if not call_timeout_s > 0:
        raise DistributedError(f"call_timeout_s={call_timeout_s!r}: expected a positive number of seconds")
