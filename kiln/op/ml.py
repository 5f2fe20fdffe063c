"""Classic machine-learning operators (the ai.onnx.ml domain)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from kiln.errors import TypeInferenceError
from kiln.ir import dtype as dt
from kiln.ir.types import TensorType
from kiln.op.registry import ELEMWISE, INJECTIVE, OPAQUE, define_op
from kiln.op.typerel import check_dtype, shape_product, tensor

# ---------------------------------------------------------------------------------------------
# ArrayFeatureExtractor


def _extract_rel(attrs, types, values) -> TensorType:
    x, idx = tensor(types[0], "X"), tensor(types[1], "Y")
    check_dtype(x, ("float32", "float64", "int64", "int32", "string"), "X")
    check_dtype(idx, ("int64",), "Y")
    k = shape_product(idx.shape) if idx.shape is not None else None
    if x.shape is None or k is None:
        return TensorType(None if x.shape is None or len(x.shape) != 1 else (1, k), x.dtype)
    return TensorType((1, k) if len(x.shape) == 1 else x.shape[:-1] + (k,), x.dtype)


def _extract_ref(attrs, x, idx):
    """Select along the last axis; a 1-D input gives one row (as ONNX Runtime does)."""
    picked = x[..., idx.reshape(-1)]
    return picked.reshape((1, -1) if x.ndim == 1 else picked.shape)


array_feature_extractor = define_op("ml.array_feature_extractor", pattern=INJECTIVE, inputs=2,
                                    infer=_extract_rel, ref=_extract_ref,
                                    doc="X[..., Y.ravel()] (a 1-D X gives shape [1, len(Y)]).")


# ---------------------------------------------------------------------------------------------
# Binarizer


@dataclass(frozen=True)
class BinarizerAttrs:
    threshold: float = 0.0


def _binarizer_rel(attrs, types, values) -> TensorType:
    x = tensor(types[0])
    check_dtype(x, ("float32", "float64", "int64", "int32"))
    return x


binarizer = define_op("ml.binarizer", pattern=ELEMWISE, attrs=BinarizerAttrs, infer=_binarizer_rel,
                      ref=lambda a, x: (x > a.threshold).astype(x.dtype),
                      doc="1 where x > threshold, else 0, in x's dtype.")


# ---------------------------------------------------------------------------------------------
# LabelEncoder


@dataclass(frozen=True)
class LabelEncoderAttrs:
    default_float: float = -0.0
    default_int64: int = -1
    default_string: str = "_Unused"
    default_tensor: np.ndarray | None = None
    keys_floats: tuple[float, ...] | None = None
    keys_int64s: tuple[int, ...] | None = None
    keys_strings: tuple[str, ...] | None = None
    keys_tensor: np.ndarray | None = None
    values_floats: tuple[float, ...] | None = None
    values_int64s: tuple[int, ...] | None = None
    values_strings: tuple[str, ...] | None = None
    values_tensor: np.ndarray | None = None


def _one_of(attrs: LabelEncoderAttrs, kind: str) -> tuple[np.ndarray, str]:
    """The single `keys_*`/`values_*` attribute that is set, as an array, with its dtype name."""
    given = [(np.asarray(v, dtype=dt.to_numpy(d)), d) for v, d in
             ((getattr(attrs, f"{kind}_floats"), "float32"), (getattr(attrs, f"{kind}_int64s"), "int64"),
              (getattr(attrs, f"{kind}_strings"), "string")) if v is not None]
    tensor_attr = getattr(attrs, f"{kind}_tensor")
    if tensor_attr is not None:
        given.append((tensor_attr.reshape(-1), dt.from_numpy(tensor_attr.dtype)))
    if len(given) != 1:
        raise TypeInferenceError(f"exactly one {kind}_* attribute must be set, got {len(given)}")
    return given[0]


def _default(attrs: LabelEncoderAttrs, dtype: str):
    """The default output value for the values' dtype."""
    if attrs.values_tensor is not None:
        if attrs.default_tensor is not None:
            return attrs.default_tensor.reshape(-1)[0]
        return "_Unused" if dtype == "string" else (-1 if dtype in dt.INTS else -0.0)
    return {"float32": attrs.default_float, "int64": attrs.default_int64, "string": attrs.default_string}[dtype]


def _label_rel(attrs: LabelEncoderAttrs, types, values) -> TensorType:
    x = tensor(types[0])
    keys, key_dtype = _one_of(attrs, "keys")
    vals, val_dtype = _one_of(attrs, "values")
    if len(keys) != len(vals):
        raise TypeInferenceError(f"{len(keys)} keys but {len(vals)} values")
    check_dtype(x, (key_dtype,), "input (the keys' dtype)")
    return TensorType(x.shape, val_dtype)


def _label_ref(attrs: LabelEncoderAttrs, x):
    """Look every element up; later duplicate keys win and a NaN key matches any NaN."""
    keys, _ = _one_of(attrs, "keys")
    vals, val_dtype = _one_of(attrs, "values")
    table = dict(zip(keys.tolist(), vals.tolist()))
    default = _default(attrs, val_dtype)
    nan_keys = [v for k, v in table.items() if isinstance(k, float) and math.isnan(k)]
    missing = nan_keys[-1] if nan_keys else default

    def lookup(v):
        if isinstance(v, float) and math.isnan(v):
            return missing
        return table.get(v, default)

    out = np.empty(x.size, dtype=dt.to_numpy(val_dtype))
    out[...] = [lookup(v) for v in x.reshape(-1).tolist()]
    return out.reshape(x.shape)


label_encoder = define_op("ml.label_encoder", host_only=True, pattern=ELEMWISE, attrs=LabelEncoderAttrs,
                          infer=_label_rel, ref=_label_ref,
                          doc="Map each element through the keys_* -> values_* table (default_* if absent).")


# ---------------------------------------------------------------------------------------------
# TreeEnsemble


@dataclass(frozen=True)
class TreeEnsembleAttrs:
    leaf_targetids: tuple[int, ...]
    leaf_weights: np.ndarray
    nodes_falseleafs: tuple[int, ...]
    nodes_falsenodeids: tuple[int, ...]
    nodes_featureids: tuple[int, ...]
    nodes_modes: np.ndarray
    nodes_splits: np.ndarray
    nodes_trueleafs: tuple[int, ...]
    nodes_truenodeids: tuple[int, ...]
    tree_roots: tuple[int, ...]
    aggregate_function: int = 1
    membership_values: np.ndarray | None = None
    n_targets: int | None = None
    nodes_hitrates: np.ndarray | None = None
    nodes_missing_value_tracks_true: tuple[int, ...] | None = None
    post_transform: int = 0


def _tree_rel(attrs: TreeEnsembleAttrs, types, values) -> TensorType:
    x = tensor(types[0])
    check_dtype(x, ("float32", "float64", "float16"))
    if x.shape is not None and len(x.shape) != 2:
        raise TypeInferenceError(f"input must have shape [N, F], got {x.shape}")
    if attrs.n_targets is None:
        raise TypeInferenceError("the `n_targets` attribute is required")
    n = len(attrs.nodes_featureids)
    node_lists = (attrs.nodes_falseleafs, attrs.nodes_falsenodeids, attrs.nodes_trueleafs,
                  attrs.nodes_truenodeids, attrs.nodes_modes.reshape(-1), attrs.nodes_splits.reshape(-1))
    if any(len(v) != n for v in node_lists) or len(attrs.leaf_targetids) != attrs.leaf_weights.size:
        raise TypeInferenceError("nodes_* (and leaf_*) attributes must all have the same length")
    if attrs.aggregate_function not in range(4) or attrs.post_transform not in range(5):
        raise TypeInferenceError(f"bad aggregate_function {attrs.aggregate_function} or "
                                 f"post_transform {attrs.post_transform}")
    return TensorType(None if x.shape is None else (x.shape[0], attrs.n_targets), x.dtype)


def member_sets(attrs: TreeEnsembleAttrs) -> dict[int, frozenset]:
    """Node index -> its set, for BRANCH_MEMBER nodes (sets are NaN-separated, in node order)."""
    members = [] if attrs.membership_values is None else attrs.membership_values.reshape(-1).tolist()
    groups, cur = [], []
    for v in members:
        if math.isnan(v):
            groups.append(frozenset(cur))
            cur = []
        else:
            cur.append(v)
    if cur:
        groups.append(frozenset(cur))
    nodes = [i for i, m in enumerate(attrs.nodes_modes.reshape(-1).tolist()) if m == 6]
    if len(groups) < len(nodes):
        raise ValueError(f"{len(nodes)} BRANCH_MEMBER nodes but {len(groups)} membership sets")
    return dict(zip(nodes, groups))


def _goes_true(mode: np.ndarray, v: np.ndarray, split: np.ndarray, node: np.ndarray, sets) -> np.ndarray:
    """The branch test of each (sample, node) pair; modes LEQ, LT, GTE, GT, EQ, NEQ, MEMBER."""
    tests = [v <= split, v < split, v >= split, v > split, v == split, v != split]
    out = np.select([mode == m for m in range(6)], tests, False)
    member = mode == 6
    if member.any():
        out[member] = [x in sets[i] for x, i in zip(v[member].tolist(), node[member].tolist())]
    return out


def _leaves(attrs: TreeEnsembleAttrs, x: np.ndarray) -> np.ndarray:
    """Leaf index reached by every sample in every tree: shape [N, trees]."""
    feat = np.asarray(attrs.nodes_featureids, np.int64)
    mode = attrs.nodes_modes.reshape(-1).astype(np.int64)
    split = attrs.nodes_splits.reshape(-1).astype(x.dtype)
    true_id, false_id = np.asarray(attrs.nodes_truenodeids), np.asarray(attrs.nodes_falsenodeids)
    true_leaf, false_leaf = np.asarray(attrs.nodes_trueleafs, bool), np.asarray(attrs.nodes_falseleafs, bool)
    nan_true = np.zeros(len(feat), bool) if attrs.nodes_missing_value_tracks_true is None else \
        np.asarray(attrs.nodes_missing_value_tracks_true, bool)
    sets = member_sets(attrs)
    rows = np.arange(x.shape[0])
    out = np.empty((x.shape[0], len(attrs.tree_roots)), np.int64)
    for t, root in enumerate(attrs.tree_roots):
        node = np.full(x.shape[0], root, np.int64)
        at_leaf = np.zeros(x.shape[0], bool)
        for _ in range(len(feat) + 1):
            if at_leaf.all():
                break
            live = ~at_leaf
            i = node[live]
            v = x[rows[live], feat[i]]
            go = _goes_true(mode[i], v, split[i], i, sets) | (np.isnan(v) & nan_true[i])
            node[live] = np.where(go, true_id[i], false_id[i])
            at_leaf[live] = np.where(go, true_leaf[i], false_leaf[i])
        else:
            raise ValueError(f"tree {t} has a cycle")
        out[:, t] = node
    return out


def _aggregate(attrs: TreeEnsembleAttrs, leaves: np.ndarray) -> np.ndarray:
    """Combine leaf weights per target: AVERAGE, SUM, MIN, MAX (targets no leaf reaches are 0)."""
    weight = attrs.leaf_weights.reshape(-1).astype(np.float64)[leaves]
    target = np.asarray(attrs.leaf_targetids, np.int64)[leaves]
    rows = np.broadcast_to(np.arange(leaves.shape[0])[:, None], leaves.shape)
    shape = (leaves.shape[0], attrs.n_targets)
    if attrs.aggregate_function in (0, 1):
        out = np.zeros(shape)
        np.add.at(out, (rows, target), weight)
        return out / leaves.shape[1] if attrs.aggregate_function == 0 else out
    reduce_, start = (np.minimum, np.inf) if attrs.aggregate_function == 2 else (np.maximum, -np.inf)
    out = np.full(shape, start)
    reduce_.at(out, (rows, target), weight)
    return np.where(np.isinf(out), 0.0, out)


def _post_transform(kind: int, s: np.ndarray) -> np.ndarray:
    """NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO (zeros stay 0), PROBIT (inverse normal CDF)."""
    if kind in (1, 3):
        keep = s != 0 if kind == 3 else np.ones(s.shape, bool)
        top = np.max(np.where(keep, s, -np.inf), axis=1, keepdims=True)
        e = np.where(keep, np.exp(s - np.where(np.isinf(top), 0.0, top)), 0.0)
        return e / np.maximum(e.sum(axis=1, keepdims=True), np.finfo(np.float64).tiny)
    if kind == 2:
        return 1.0 / (1.0 + np.exp(-s))
    if kind == 4:
        return np.vectorize(_probit, otypes=[np.float64])(s)
    return s


def _probit(p: float) -> float:
    """The standard normal quantile; -inf/inf at 0/1 and NaN outside [0, 1]."""
    if 0.0 < p < 1.0:
        return NormalDist().inv_cdf(p)
    return {0.0: -math.inf, 1.0: math.inf}.get(p, math.nan)


def _tree_ref(attrs: TreeEnsembleAttrs, x):
    scores = _aggregate(attrs, _leaves(attrs, x))
    return _post_transform(attrs.post_transform, scores).astype(x.dtype)


tree_ensemble = define_op("ml.tree_ensemble", pattern=OPAQUE, attrs=TreeEnsembleAttrs, infer=_tree_rel,
                          ref=_tree_ref,
                          doc="Evaluate a tree ensemble on [N, F] features: [N, n_targets] scores.")
