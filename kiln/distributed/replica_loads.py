"""What each replica of a set is doing: calls in flight, the capped ones among them, and whether it is up.

Least loaded first means the fewest calls in flight; among equals the replica after the last one
used (round-robin), so that an idle set spreads requests instead of sending each to replica 0.
Not thread-safe: the ReplicaSet holds its lock around every call.
"""

from __future__ import annotations

import enum


class ReplicaState(enum.Enum):
    UP = "up"
    DOWN = "down"  # its actor died; Ray is restarting it (calls sent meanwhile wait for the restart)
    DEAD = "dead"  # out of restarts


class Loads:
    def __init__(self, replicas: int) -> None:
        self.flight = [0] * replicas
        self.capped = [0] * replicas
        self.state = [ReplicaState.UP] * replicas
        self._turn = 0

    def least_loaded(self, limit: int | None = None, capped_limit: int | None = None,
                     avoid: int | None = None) -> int | None:
        """The up replica with the fewest calls in flight, under `limit` (and `capped_limit` capped ones)
        when given, else None. Without a limit a call must go somewhere: the least loaded of the up
        replicas other than `avoid`, else of those restarting, else `avoid` itself; None when all are dead."""
        def fits(i: int) -> bool:
            return (limit is None or self.flight[i] < limit) and \
                (capped_limit is None or self.capped[i] < capped_limit)
        up = [i for i, s in enumerate(self.state) if s is ReplicaState.UP and fits(i)]
        if limit is not None or capped_limit is not None:
            return self._least(up)
        down = [i for i, s in enumerate(self.state) if s is ReplicaState.DOWN]
        for candidates in ([i for i in up if i != avoid], [i for i in down if i != avoid], up + down):
            if candidates:
                return self._least(candidates)
        return None

    def add(self, replica: int, capped: bool) -> None:
        self.flight[replica] += 1
        self.capped[replica] += capped
        self._turn = replica + 1

    def remove(self, replica: int, capped: bool) -> None:
        self.flight[replica] -= 1
        self.capped[replica] -= capped

    def mark_down(self, replica: int) -> bool:
        """True when `replica` was up (its first failure: probe it); a dead one stays dead."""
        was_up = self.state[replica] is ReplicaState.UP
        if was_up:
            self.state[replica] = ReplicaState.DOWN
        return was_up

    def mark_up(self, replica: int) -> None:
        if self.state[replica] is ReplicaState.DOWN:
            self.state[replica] = ReplicaState.UP

    def mark_dead(self, replica: int) -> None:
        self.state[replica] = ReplicaState.DEAD

    def up(self) -> int:
        return sum(s is ReplicaState.UP for s in self.state)

    def dead(self) -> bool:
        """Every replica is out of restarts: no call can be answered any more."""
        return all(s is ReplicaState.DEAD for s in self.state)

    def _least(self, candidates: list[int]) -> int | None:
        n = len(self.flight)
        return min(candidates, key=lambda i: (self.flight[i], (i - self._turn) % n), default=None)
