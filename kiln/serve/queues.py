"""The scheduler's queues: one real-time queue in arrival order over every model, and one best-effort
queue per model served round-robin (so one busy model cannot starve another's best-effort work);
in FIFO mode a single queue in arrival order over everything (priorities ignored: the baseline).
Not thread-safe: the scheduler holds its lock around every call."""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from kiln.serve.dispatch import InferRequest, Priority
from kiln.serve.served import Served


@dataclass(eq=False)
class Pending:
    """A checked request waiting for its run; `deadline` in perf_counter seconds (None: none)."""

    request: InferRequest
    served: Served
    feeds: dict[str, Any]
    priority: Priority
    deadline: float | None
    future: Future = field(default_factory=Future)

    @property
    def rows(self) -> int:
        """Its batch rows: the first dim of its first input."""
        return next(iter(self.feeds.values())).shape[0]

    def shape_key(self) -> tuple:
        """Inputs' names, dtypes and dims past the first: requests that agree here concatenate."""
        return tuple((n, v.dtype.str, v.shape[1:]) for n, v in self.feeds.items())


class Queues:
    def __init__(self, fifo: bool):
        self.fifo = fifo
        self._rt: collections.deque[Pending] = collections.deque()
        self._be: dict[str, collections.deque[Pending]] = {}
        self._turn = 0  # the BE queue the next round-robin pick starts at
        self._count: collections.Counter[str] = collections.Counter()

    def push(self, p: Pending) -> None:
        self._queue_of(p).append(p)
        self._count[p.served.name] += 1

    def queued(self, name: str) -> int:
        return self._count[name]

    def has_rt(self) -> bool:
        return bool(self._rt) and not self.fifo

    def has_be(self) -> bool:
        """Work for the BE lane: a BE request (in FIFO mode: any request)."""
        return bool(self._rt) if self.fifo else any(self._be.values())

    def pop_rt(self, ready: Callable[[Pending], bool] | None = None) -> Pending | None:
        """The oldest RT request, when `ready` (if given) accepts it: RT stays in arrival order."""
        if not self._rt or self.fifo or (ready is not None and not ready(self._rt[0])):
            return None
        return self._take(self._rt.popleft())

    def pop_be(self, ready: Callable[[Pending], bool] | None = None) -> Pending | None:
        """FIFO mode: the oldest request; else the head of the next non-empty BE queue after the last one
        served; with `ready`, only a head it accepts (a model whose replicas are busy is skipped)."""
        if self.fifo:
            ok = self._rt and (ready is None or ready(self._rt[0]))
            return self._take(self._rt.popleft()) if ok else None
        order = list(self._be)
        start = self._turn % len(order) if order else 0
        name = next((n for n in order[start:] + order[:start]
                     if self._be[n] and (ready is None or ready(self._be[n][0]))), None)
        if name is None:
            return None
        self._turn = order.index(name) + 1
        return self._take(self._be[name].popleft())

    def take_batch(self, first: Pending, rows: int) -> list[Pending]:
        """Queued requests of `first`'s model and queue that concatenate with it, oldest first,
        while their rows fit in `rows`; removed from the queue."""
        queue, key, taken = self._queue_of(first), first.shape_key(), []
        for p in list(queue):
            if p.served is first.served and p.shape_key() == key and p.rows <= rows:
                rows -= p.rows
                queue.remove(p)
                taken.append(self._take(p))
        return taken

    def remove(self, p: Pending) -> bool:
        """Take `p` out if it is still queued (True), e.g. when its deadline passed."""
        queue = self._queue_of(p)
        if p not in queue:
            return False
        queue.remove(p)
        self._take(p)
        return True

    def clear(self) -> list[Pending]:
        """Every queued request, removed."""
        out = list(self)
        self._rt.clear()
        for q in self._be.values():
            q.clear()
        self._count.clear()
        return out

    def __iter__(self) -> Iterator[Pending]:
        yield from self._rt
        for q in self._be.values():
            yield from q

    def __len__(self) -> int:
        return sum(self._count.values())

    def _queue_of(self, p: Pending) -> collections.deque[Pending]:
        if self.fifo or p.priority is Priority.RT:
            return self._rt
        return self._be.setdefault(p.served.name, collections.deque())

    def _take(self, p: Pending) -> Pending:
        self._count[p.served.name] -= 1
        return p
