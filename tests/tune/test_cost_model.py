import numpy as np

from kiln.tune.cost_model import CostModel, GradientBoosting, fit_tree


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def test_a_tree_splits_on_the_informative_feature():
    x = np.array([[0.0, 5.0], [1.0, 3.0], [2.0, 9.0], [3.0, 1.0]])
    tree = fit_tree(x, np.array([1.0, 1.0, 4.0, 4.0]), depth=1, min_leaf=1)
    assert tree.feature[0] == 0 and 1.0 < tree.threshold[0] < 2.0
    assert np.allclose(tree.predict(x), [1, 1, 4, 4])


def test_boosting_learns_a_synthetic_ranking():
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 5, size=(160, 4))
    y = (x[:, 0] - 2.0) ** 2 + 0.5 * x[:, 1] + (x[:, 2] > 2.5) + 0.01 * rng.standard_normal(160)
    model = GradientBoosting(trees=80).fit(x[:120], y[:120])
    assert _spearman(model.predict(x[120:]), y[120:]) > 0.85


def test_the_cost_model_ranks_fast_before_slow_and_treats_failures_as_slow():
    rng = np.random.default_rng(1)
    model = CostModel()
    for _ in range(30):
        f = rng.uniform(0, 4, size=3)
        model.add(f, float(np.exp(f[0])) * 1e-6)
    assert not model.trained
    model.fit()
    assert model.trained
    assert model.predict(np.array([0.2, 1, 1]))[0] < model.predict(np.array([3.8, 1, 1]))[0]
    model.add(np.array([0.1, 0.1, 0.1]), None)
    model.fit()  # a failure has no time: it trains as slower than anything measured
    assert np.isfinite(model.predict(np.zeros(3))).all()
