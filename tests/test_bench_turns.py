"""kiln.bench.alternate: engines take turns of one untimed run and `burst` timed runs."""

import pytest

from kiln.bench import Engine, alternate


def _recording(log, name):
    return Engine(name, lambda: log.append(name))


@pytest.mark.parametrize("runs, burst", [(7, 3), (5, 5), (1, 4), (6, 1)])
def test_turns_time_exactly_runs_per_engine(runs, burst):
    log = []
    eng = [_recording(log, "a"), _recording(log, "b")]
    alternate(eng, runs, burst, settle_s=0.0)
    assert [len(e.times) for e in eng] == [runs, runs]
    turns = -(-runs // burst)
    assert len(log) == 2 * (runs + turns)  # one untimed switch-over run per turn
    first = min(burst, runs) + 1
    assert log[:first] == ["a"] * first and log[first:2 * first] == ["b"] * first


def test_deadline_stops_after_five_turns():
    eng = [_recording([], "a")]
    alternate(eng, 100, 2, deadline_s=0.0, settle_s=0.0)
    assert len(eng[0].times) == 10


def test_a_turn_settles_for_its_time_untimed():
    log = []
    eng = [_recording(log, "a"), _recording(log, "b")]
    alternate(eng, 2, 2, settle_s=0.01)
    first_b = log.index("b")
    assert first_b > 2 + 1  # more than one untimed run of a fast engine before its 2 timed ones
    assert [len(e.times) for e in eng] == [2, 2]


def test_rejects_empty_turns():
    with pytest.raises(ValueError, match="burst"):
        alternate([_recording([], "a")], 3, 0)
