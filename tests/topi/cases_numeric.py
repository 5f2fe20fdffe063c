"""Registry-test cases (te eval against the references) for the optimizer steps, cosine windows, STFT,
det, tree ensembles and integer TfIdfVectorizer (compiled variants: test_misc_numeric.py)."""

from __future__ import annotations

import numpy as np

from tests.topi.harness import rand


def _optimizer(name: str, roles: int, **kw):
    def cases(rng):
        from tests.topi.cases import A

        out = []
        for dt, t in (("float32", 0), ("float32", 3), ("float64", 1)):
            r, step = np.array(0.1, dt), np.array(t, np.int64)
            xs = [rand((3, 5), dt, rng), rand((1,), dt, rng)]
            groups = [xs] + [[rand((3, 5), dt, rng), rand((1,), dt, rng)] for _ in range(roles - 1)]
            groups[-1] = [np.abs(rand((5,), dt, rng)), np.abs(groups[-1][1])]  # a state broadcast onto X; H >= 0
            out.append((A(name, **kw), [r, step] + [a for g in groups for a in g], ()))
        return out

    return cases


def _windows(name: str):
    def cases(rng):
        from tests.topi.cases import A

        return [(A(name, periodic=p, output_datatype=dt), [np.array(n, np.int64)], (0,))
                for n in (1, 2, 7, 10) for p in (0, 1) for dt in ("float32", "float64")]

    return cases


def _stft(rng):
    from tests.topi.cases import A

    out = []
    for dt, last in (("float32", 1), ("float64", 2)):
        x = rand((2, 23, last), dt, rng)
        out.append((A("signal.stft"), [x, np.array(4, np.int64), None, np.array(7, np.int64)], (1, 3)))
        out.append((A("signal.stft", onesided=0), [x, np.array(3, np.int64), rand((6,), dt, rng)], (1,)))
    return out


def _det(rng):
    return [(None, [rand(s, dt, rng)], ()) for s, dt in (((1, 1), "float32"), ((3, 3), "float64"),
                                                          ((2, 5, 5), "float32"), ((4, 2, 2), "float64"))]


def tree_attrs(agg: int = 1, post: int = 0):
    """Two trees over 3 features: LEQ, MEMBER {1, 3}, and GT tracking missing values as true."""
    from tests.topi.cases import A

    return A("ml.tree_ensemble", leaf_targetids=(0, 1, 0, 2, 1),
             leaf_weights=np.array([1.5, -2.0, 0.25, 3.0, 0.5], np.float32),
             nodes_falseleafs=(1, 1, 1), nodes_falsenodeids=(0, 2, 4), nodes_featureids=(0, 1, 2),
             nodes_modes=np.array([0, 6, 3], np.uint8), nodes_splits=np.array([0.5, 0.0, -0.2], np.float32),
             nodes_trueleafs=(0, 1, 1), nodes_truenodeids=(1, 1, 3), tree_roots=(0, 2), aggregate_function=agg,
             membership_values=np.array([1.0, 3.0], np.float32), n_targets=3,
             nodes_missing_value_tracks_true=(0, 0, 1), post_transform=post)


def tree_input(rng, dtype: str, n: int = 7) -> np.ndarray:
    x = rng.standard_normal((n, 3)).astype(dtype)
    x[:, 1] = rng.choice([1.0, 2.0, 3.0, np.nan], n)
    x[0, 0], x[1, 2] = 0.5, np.nan  # on the split; missing
    return x


def _tree(rng):
    return [(tree_attrs(agg, post), [tree_input(rng, dt)], ())
            for agg in range(4) for post in range(4) for dt in ("float32", "float64")]


def tfidf_attrs(mode: str = "TF", lo: int = 1, hi: int = 2, skip: int = 2, weights=None):
    from tests.topi.cases import A

    return A("string.tf_idf_vectorizer", max_gram_length=hi, max_skip_count=skip, min_gram_length=lo, mode=mode,
             ngram_counts=(0, 3), ngram_indexes=(0, 1, 2, 3, 4, 5), pool_int64s=(2, 3, 5, 2, 3, 5, 5, 3, 3),
             weights=weights)


def _tfidf(rng):
    out = []
    for mode, w in (("TF", None), ("IDF", (0.5, 1.0, 2.0, 1.5, 3.0, 0.25)), ("TFIDF", (1, 2, 3, 4, 5, 6))):
        for lo, hi, skip in ((1, 1, 0), (1, 2, 2), (2, 2, 0)):
            for shape, dt in (((13,), "int32"), ((3, 7), "int64"), ((1,), "int64")):
                out.append((tfidf_attrs(mode, lo, hi, skip, w), [rand(shape, dt, rng, 1, 6)], ()))
    return out


def NUMERIC_CASES() -> dict:
    return {
        "train.adagrad": _optimizer("train.adagrad", 3, decay_factor=0.1, norm_coefficient=0.01),
        "train.adam": _optimizer("train.adam", 4, norm_coefficient=0.01, norm_coefficient_post=0.02),
        "train.momentum": _optimizer("train.momentum", 3, alpha=0.9, beta=0.5, mode="nesterov",
                                     norm_coefficient=0.01),
        "signal.hann_window": _windows("signal.hann_window"),
        "signal.hamming_window": _windows("signal.hamming_window"),
        "signal.blackman_window": _windows("signal.blackman_window"),
        "signal.stft": _stft,
        "linalg.det": _det,
        "ml.tree_ensemble": _tree,
        "string.tf_idf_vectorizer": _tfidf,
    }
