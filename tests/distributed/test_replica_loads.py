"""Least-loaded routing of a replica set, without Ray: fewest calls in flight, ties round-robin, caps."""

from __future__ import annotations

from kiln.distributed.replica_loads import Loads


def test_fewest_in_flight_first_and_ties_round_robin():
    loads = Loads(3)
    picked = []
    for _ in range(6):
        i = loads.least_loaded()
        loads.add(i, capped=False)
        picked.append(i)
    assert picked == [0, 1, 2, 0, 1, 2]
    loads.remove(1, capped=False)
    loads.remove(1, capped=False)
    assert loads.least_loaded() == 1


def test_limits_leave_busy_replicas_out():
    loads = Loads(2)
    loads.add(0, capped=True)
    loads.add(1, capped=False)
    assert loads.least_loaded(limit=2, capped_limit=1) == 1
    loads.add(1, capped=True)
    assert loads.least_loaded(limit=2, capped_limit=1) is None  # both hold a capped call
    assert loads.least_loaded(limit=2) == 0
    loads.add(0, capped=False)
    assert loads.least_loaded(limit=2) is None


def test_a_lost_replica_is_avoided_until_it_is_up_again():
    loads = Loads(2)
    assert loads.mark_down(0) and not loads.mark_down(0)  # the first failure alone probes it
    assert loads.up() == 1
    loads.add(1, capped=False)
    assert loads.least_loaded() == 1  # busier, but up
    assert loads.least_loaded(limit=2) == 1
    assert loads.least_loaded(avoid=1) == 0  # a retry waits for the restart rather than go back
    loads.mark_up(0)
    assert loads.least_loaded() == 0 and loads.up() == 2


def test_only_the_failed_replica_left_takes_its_retry_and_all_dead_is_none():
    loads = Loads(1)
    loads.mark_down(0)
    assert loads.least_loaded(avoid=0) == 0
    assert not loads.dead()
    loads.mark_dead(0)
    loads.mark_up(0)  # a dead replica does not come back
    assert loads.least_loaded() is None and loads.up() == 0 and loads.dead()
