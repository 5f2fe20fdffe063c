"""`kiln serve --ray`: a Dispatcher (kiln.serve.dispatch) whose run is a call to one of a model's replicas.

The front end, the request checks, queue limits, timeouts and RT before BE stay as the in-process
scheduler has them; what changes is what a run is. A run in another process cannot be preempted at a
kernel checkpoint, so this dispatcher bounds how much best-effort work a replica holds instead:
- requests wait in the dispatcher's queues (kiln.serve.queues: RT in arrival order first, BE per model
  round-robin), not in the actors' mailboxes, so an RT request overtakes every BE one still queued;
- a replica holds at most DEPTH calls (one running, the next already there, hiding the round trip),
  of which at most BE_PER_REPLICA best-effort: an RT request waits behind at most one BE run;
- RT goes to the least-loaded replica with room; BE only to one holding no BE call.
Each model is compiled (or loaded) in the server process and shipped to its replicas as a bundle.
Dynamic batching is not done on this path: a model configured with max_batch is refused.
"""

from __future__ import annotations

import collections
import threading
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING

from kiln.distributed.ray_env import connect
from kiln.distributed.replica_set import ReplicaSet
from kiln.errors import (
    KilnError,
    ServeError,
    UnknownModelError,
)
from kiln.serve.admission import Admission
from kiln.serve.dispatch import ModelConfig, ModelStats, Priority
from kiln.serve.queues import Pending
from kiln.serve.served import Served, served

if TYPE_CHECKING:
    from kiln.runtime.model import Model

DEPTH = 2
BE_PER_REPLICA = 1
POLL_S = 0.05


class RayDispatcher(Admission):
    """Serves each model on `config.replicas` Ray actors of `config.cores` cores (one when unset), in the
    cluster at `address` (a local one when None). `fifo`: one queue in arrival order, priorities ignored."""

    def __init__(self, address: str | None = None, fifo: bool = False) -> None:
        connect(address)  # a server without its cluster fails at start, not at its first request
        super().__init__(fifo)
        self.address = address
        self._replicas: dict[Served, ReplicaSet] = {}
        self._running: collections.Counter[Served] = collections.Counter()  # sent, not yet answered
        self._thread = threading.Thread(target=self._loop, name="kiln-serve-ray", daemon=True)
        self._thread.start()

    def add(self, name: str, model: Model, config: ModelConfig) -> None:
        if config.max_batch > 0:
            raise ServeError(f"model '{name}': max_batch={config.max_batch}, but kiln serve --ray does not batch "
                             "requests; set max_batch to 0 or serve without --ray")
        entry = served(name, model, config)
        replicas = ReplicaSet(model, replicas=config.replicas, threads=config.cores, address=self.address, name=name)
        with self._cv:
            old = self._served.get(name)
            self._served[name] = entry
            self._replicas[entry] = replicas
            self._stats.setdefault(name, ModelStats())
        if old is not None:
            threading.Thread(target=self._retire, args=(old,), daemon=True).start()

    def remove(self, name: str) -> None:
        """Blocks until the model's queued and running requests are done, then ends its replicas."""
        with self._cv:
            entry = self._served.pop(name, None)
        if entry is None:
            raise UnknownModelError(f"no model named '{name}' is served")
        self._retire(entry)

    def ready(self, name: str) -> bool:
        """`name` is served and at least one of its replicas is up."""
        with self._cv:
            entry = self._served.get(name)
            return entry is not None and self._replicas[entry].up() > 0

    def replicas(self, name: str) -> ReplicaSet:
        """The replica set serving `name` (for reports and tests)."""
        with self._cv:
            return self._replicas[self._served[name]]

    def close(self, drain: bool = True) -> None:
        """Stop taking requests, answer (or with drain=False fail) the queued ones, then end every replica."""
        self._stop_admitting(drain)
        self._thread.join()
        with self._cv:
            self._cv.wait_for(lambda: not any(self._running.values()))
            sets = list(self._replicas.values())
            self._replicas.clear()
        for replicas in sets:
            replicas.close()

    # -- sending ---------------------------------------------------------------------------------

    def _loop(self) -> None:
        """Send each request once a replica of its model has room; fail those queued past their deadline."""
        while True:
            with self._cv:
                work = self._work()
                while work is None:
                    self._cv.wait(self._until_deadline())
                    work = self._work()
            expired, send = work
            for p in expired:
                self._expire(p)
            if send == "closed":
                return
            if send is not None:
                self._send(*send)

    def _work(self) -> tuple[list[Pending], tuple[Pending, int | None] | str | None] | None:
        """(under the lock) requests past their deadline and the next one to send, or "closed" when
        closing and nothing is queued; None when there is nothing to do yet."""
        expired = self._expired()
        p = self._queues.pop_rt(self._has_room) or self._queues.pop_be(self._has_room)
        if p is not None:
            self._running[p.served] += 1
            return expired, (p, self._room(p))
        if self._closed and not self._queues:
            return expired, "closed"
        return (expired, None) if expired else None

    def _until_deadline(self) -> float:
        """How long the loop may sleep: until the next deadline, and at most POLL_S (a replica that comes
        back up after a restart tells nobody)."""
        if not self._deadlines:
            return POLL_S
        return min(POLL_S, max(0.0, self._deadlines[0][0] - time.perf_counter()))

    def _room(self, p: Pending) -> int | None:
        """(under the lock) the replica `p` may go to now (None: none has room)."""
        be = p.priority is Priority.BE and not self.fifo
        return self._replicas[p.served].free(DEPTH, BE_PER_REPLICA if be else None)

    def _has_room(self, p: Pending) -> bool:
        """A replica has room, or none will ever have (every one dead: sending fails the request at once)."""
        return self._room(p) is not None or self._replicas[p.served].dead()

    def _send(self, p: Pending, replica: int | None) -> None:
        """Call a replica for `p` (its client may have cancelled it while it was queued)."""
        if not p.future.set_running_or_notify_cancel():
            self._done(p)
            return
        start = time.perf_counter()
        with self._cv:
            self._stats[p.served.name].queue_s.observe(start - p.request.arrival)
            replicas = self._replicas[p.served]
        be = p.priority is Priority.BE and not self.fifo
        try:
            answer = replicas.submit(p.feeds, replica=replica, capped=be)
        except KilnError as e:
            self._finish(p, start, error=e)
            return
        answer.add_done_callback(lambda f: self._answered(p, start, f))

    def _answered(self, p: Pending, start: float, answer: Future) -> None:
        error = answer.exception()
        if error is not None:
            self._finish(p, start, error=error)
            return
        named = answer.result()
        self._finish(p, start, outputs=[named[n] for n in p.served.output_names])

    def _finish(self, p: Pending, start: float, outputs: list | None = None,
                error: BaseException | None = None) -> None:
        with self._cv:
            stats = self._stats[p.served.name]
            stats.compute_s.observe(time.perf_counter() - start)
            stats.batch_sizes.observe(1)
            stats.requests += 1
            stats.failures += error is not None
        self._done(p)
        if error is not None:
            p.future.set_exception(error)
        else:
            p.future.set_result(p.served.answer(p.request, outputs))

    def _done(self, p: Pending) -> None:
        """`p` no longer holds a replica: the loop may send the next request."""
        with self._cv:
            self._running[p.served] -= 1
            self._cv.notify_all()

    def _retire(self, entry: Served) -> None:
        """End `entry`'s replicas once its queued and running requests are answered."""
        with self._cv:
            self._cv.wait_for(lambda: not self._running[entry] and not any(q.served is entry for q in self._queues))
            replicas = self._replicas.pop(entry, None)
        if replicas is not None:
            replicas.close()

