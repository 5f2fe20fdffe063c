"""A cost model: gradient-boosted regression trees (numpy only) predicting a candidate's log-time.

Least-squares boosting: each shallow tree fits the residuals of the trees before it, with shrinkage.
Log-time makes a 2x difference the same size for a fast and a slow kernel; the search only uses the
ranking the predictions imply, so the model is refit from scratch on every batch of measurements
(tens to hundreds of points: exact split search is cheap).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Tree:
    """Node arrays: an internal node splits on feature[n] <= threshold[n]; a leaf (feature -1) holds value[n]."""

    feature: list[int] = field(default_factory=list)
    threshold: list[float] = field(default_factory=list)
    left: list[int] = field(default_factory=list)
    right: list[int] = field(default_factory=list)
    value: list[float] = field(default_factory=list)

    def _node(self) -> int:
        for a, v in ((self.feature, -1), (self.threshold, 0.0), (self.left, -1), (self.right, -1), (self.value, 0.0)):
            a.append(v)
        return len(self.feature) - 1

    def predict(self, x: np.ndarray) -> np.ndarray:
        node = np.zeros(len(x), dtype=np.int64)
        feature, threshold = np.asarray(self.feature), np.asarray(self.threshold)
        left, right, value = np.asarray(self.left), np.asarray(self.right), np.asarray(self.value)
        rows = np.arange(len(x))
        while True:
            f = feature[node]
            inner = f >= 0
            if not inner.any():
                return value[node]
            go_left = x[rows, np.where(inner, f, 0)] <= threshold[node]
            node = np.where(inner, np.where(go_left, left[node], right[node]), node)


def _best_split(x: np.ndarray, r: np.ndarray, min_leaf: int) -> tuple[int, float, float] | None:
    """(feature, threshold, gain) of the split that most lowers the squared error, or None."""
    n = len(r)
    best: tuple[int, float, float] | None = None
    total = r.sum()
    for f in range(x.shape[1]):
        order = np.argsort(x[:, f], kind="stable")
        xs, rs = x[order, f], r[order]
        csum = np.cumsum(rs)[:-1]
        k = np.arange(1, n)
        valid = (xs[1:] > xs[:-1]) & (k >= min_leaf) & (n - k >= min_leaf)
        if not valid.any():
            continue
        gain = csum ** 2 / k + (total - csum) ** 2 / (n - k) - total ** 2 / n
        gain = np.where(valid, gain, -np.inf)
        i = int(np.argmax(gain))
        if gain[i] > 1e-12 and (best is None or gain[i] > best[2]):
            best = (f, float((xs[i] + xs[i + 1]) / 2), float(gain[i]))
    return best


def fit_tree(x: np.ndarray, r: np.ndarray, depth: int, min_leaf: int) -> Tree:
    tree = Tree()

    def grow(rows: np.ndarray, d: int) -> int:
        node = tree._node()
        tree.value[node] = float(r[rows].mean())
        split = _best_split(x[rows], r[rows], min_leaf) if d < depth and len(rows) >= 2 * min_leaf else None
        if split is None:
            return node
        f, t, _ = split
        mask = x[rows, f] <= t
        tree.feature[node], tree.threshold[node] = f, t
        tree.left[node] = grow(rows[mask], d + 1)
        tree.right[node] = grow(rows[~mask], d + 1)
        return node

    grow(np.arange(len(r)), 0)
    return tree


@dataclass
class GradientBoosting:
    trees: int = 60
    depth: int = 3
    learning_rate: float = 0.2
    min_leaf: int = 2
    subsample: float = 0.8
    seed: int = 0
    base: float = 0.0
    fitted: list[Tree] = field(default_factory=list)

    def fit(self, x: np.ndarray, y: np.ndarray) -> GradientBoosting:
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        rng = np.random.default_rng(self.seed)
        self.base = float(y.mean()) if len(y) else 0.0
        self.fitted = []
        pred = np.full(len(y), self.base)
        for _ in range(self.trees if len(y) >= 2 * self.min_leaf else 0):
            rows = np.sort(rng.choice(len(y), max(2 * self.min_leaf, int(self.subsample * len(y))), replace=False))
            tree = fit_tree(x[rows], (y - pred)[rows], self.depth, self.min_leaf)
            self.fitted.append(tree)
            pred += self.learning_rate * tree.predict(x)
        return self

    def predict(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, np.float64)
        out = np.full(len(x), self.base)
        for tree in self.fitted:
            out += self.learning_rate * tree.predict(x)
        return out


class CostModel:
    """Measured (features, seconds) of one task -> a predicted log-time for unmeasured candidates."""

    MIN_POINTS = 4  # below this, predictions are noise: the search explores at random

    def __init__(self, seed: int = 0):
        self.x: list[np.ndarray] = []
        self.y: list[float] = []
        self.model = GradientBoosting(seed=seed)

    def add(self, features: np.ndarray, seconds: float | None) -> None:
        """A failed candidate counts as very slow, so the search learns to avoid its neighbourhood."""
        self.x.append(np.asarray(features, np.float64))
        self.y.append(float("nan") if seconds is None else float(np.log(seconds)))

    @property
    def trained(self) -> bool:
        return len(self.model.fitted) > 0

    def fit(self) -> None:
        y = np.asarray(self.y)
        ok = ~np.isnan(y)
        if ok.sum() < self.MIN_POINTS:
            return
        y = np.where(ok, y, y[ok].max() + 1.0)
        self.model.fit(np.stack(self.x), y)

    def predict(self, features: np.ndarray) -> np.ndarray:
        return self.model.predict(np.atleast_2d(features))
