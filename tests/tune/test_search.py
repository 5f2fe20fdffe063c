import numpy as np

from kiln.topi.knobs import KnobSpace
from kiln.tune.cost_model import CostModel
from kiln.tune.search import all_configs, config_id, neighbour, propose


def _space(n: int = 6) -> KnobSpace:
    return KnobSpace({"a": (tuple(range(n)), 0), "b": ((1, 2, 4, 8), 1), "c": (("x", "y"), "x")})


def _featurize(c):
    return np.array([c["a"], np.log2(c["b"]), c["c"] == "y"], dtype=float)


def _truth(c) -> float:
    return (c["a"] - 3) ** 2 + abs(np.log2(c["b"]) - 2) + (c["c"] == "y")


def test_neighbour_moves_exactly_one_knob():
    rng = np.random.default_rng(0)
    space = _space()
    c = {"a": 0, "b": 1, "c": "x"}
    for _ in range(20):
        n = neighbour(c, space, rng)
        assert sum(n[k] != c[k] for k in c) == 1
        assert all(n[k] in space.knobs[k][0] for k in n)


def test_propose_explores_at_random_before_the_model_is_trained_and_never_repeats():
    rng = np.random.default_rng(0)
    space = _space()
    measured = {config_id({"a": 0, "b": 1, "c": "x"}, space)}
    batch = propose(space, measured, CostModel(), _featurize, 10, rng, [])
    ids = [config_id(c, space) for c in batch]
    assert len(batch) == 10 and len(set(ids)) == 10 and not set(ids) & measured


def test_propose_exploits_a_trained_model():
    rng = np.random.default_rng(0)
    space = _space(40)  # 320 configs: annealed, not enumerated
    model, measured = CostModel(), set()
    for c in [all_configs(space)[i] for i in rng.choice(space.size(), 40, replace=False)]:
        model.add(_featurize(c), float(np.exp(_truth(c) / 100)))
        measured.add(config_id(c, space))
    model.fit()
    batch = propose(space, measured, model, _featurize, 8, rng, [])
    picked = sorted(_truth(c) for c in batch)
    typical = np.median([_truth(c) for c in all_configs(space)])
    assert picked[0] <= 2 and np.median(picked) < typical


def test_propose_stops_when_the_space_is_exhausted():
    space = KnobSpace({"a": ((1, 2, 3), 1)})
    measured = {config_id({"a": v}, space) for v in (1, 2)}
    assert propose(space, measured, CostModel(), lambda c: np.zeros(1), 8, np.random.default_rng(0), []) == [{"a": 3}]
