"""ai.onnx.ml operators against onnxruntime on random inputs, plus type relations."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from kiln.errors import TypeInferenceError
from kiln.frontend.onnx import from_onnx
from kiln.ir import ANY, SizeVar, TensorType, Var
from kiln.op import get_op
from kiln.op.interpreter import evaluate
from kiln.op.ml import LabelEncoderAttrs

ort = pytest.importorskip("onnxruntime")
ML = "ai.onnx.ml"
CODES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
         np.dtype(np.int64): TensorProto.INT64, np.dtype(np.int32): TensorProto.INT32,
         np.dtype(object): TensorProto.STRING}


def check_vs_ort(node, feeds: dict, out_type, ml_opset=5):
    """Run one ai.onnx.ml node in Kiln and onnxruntime and compare the output."""
    ins = [helper.make_tensor_value_info(k, CODES[v.dtype], v.shape) for k, v in feeds.items()]
    out = helper.make_tensor_value_info(node.output[0], out_type, None)
    out.type.tensor_type.shape.SetInParent()
    model = helper.make_model(helper.make_graph([node], "g", ins, [out]), ir_version=10,
                              opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(ML, ml_opset)])
    ours = evaluate(from_onnx(model), feeds)[0]
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert ours.shape == ref.shape and ours.dtype == ref.dtype
    if ref.dtype == object:
        assert ours.tolist() == ref.tolist()
    else:
        np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape,idx", [((7,), [0, 6, 2]), ((3, 5), [[4, 0]]), ((2, 1, 11), [10]), ((1, 3), [1, 1])])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_array_feature_extractor(shape, idx, dtype):
    x = (np.random.default_rng(0).standard_normal(shape) * 10).astype(dtype)
    node = helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], domain=ML)
    check_vs_ort(node, {"x": x, "i": np.array(idx, np.int64)}, CODES[np.dtype(dtype)])


@pytest.mark.parametrize("threshold", [0.0, 0.5, -1.0])
def test_binarizer(threshold):
    x = np.random.default_rng(1).standard_normal((3, 13)).astype(np.float32)
    check_vs_ort(helper.make_node("Binarizer", ["x"], ["y"], domain=ML, threshold=threshold), {"x": x},
                 TensorProto.FLOAT)


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.int64])
def test_binarizer_other_dtypes(dtype):
    """onnxruntime implements float32 only."""
    x = (np.random.default_rng(2).standard_normal((1, 7)) * 3).astype(dtype)
    y = get_op("ml.binarizer").reference(get_op("ml.binarizer").attrs_type(1.0), x)
    assert y.dtype == x.dtype
    np.testing.assert_array_equal(y, (x > 1).astype(dtype))


@pytest.mark.parametrize("kw,x,out", [
    ({"keys_strings": ["a", "b"], "values_int64s": [1, 2], "default_int64": 7},
     np.array([["a", "c"], ["b", "a"]], object), TensorProto.INT64),
    ({"keys_int64s": [5, 3], "values_strings": ["five", "three"]}, np.array([3, 5, 4], np.int64), TensorProto.STRING),
    ({"keys_floats": [0.5, float("nan")], "values_floats": [1.0, 2.0], "default_float": 9.0},
     np.array([0.5, np.nan, 1.0], np.float32), TensorProto.FLOAT),
    ({"keys_tensor": numpy_helper.from_array(np.array([1, 2], np.int64), "k"),
      "values_tensor": numpy_helper.from_array(np.array([2.5, 3.5], np.float32), "v"),
      "default_tensor": numpy_helper.from_array(np.array([-1.0], np.float32), "d")},
     np.array([[2, 7, 1]], np.int64), TensorProto.FLOAT),
])
def test_label_encoder(kw, x, out):
    check_vs_ort(helper.make_node("LabelEncoder", ["x"], ["y"], domain=ML, **kw), {"x": x}, out, ml_opset=4)


def test_label_encoder_spec_details():
    """The last of repeated keys wins (the spec; onnxruntime keeps the first); int32 tensor keys."""
    enc = get_op("ml.label_encoder")
    attrs = LabelEncoderAttrs(keys_strings=("a", "b", "a"), values_int64s=(1, 2, 3))
    assert enc.reference(attrs, np.array(["a", "b", "z"], object)).tolist() == [3, 2, -1]
    attrs = LabelEncoderAttrs(keys_tensor=np.array([1, 2], np.int32), values_tensor=np.array([0.5, 1.5]))
    y = enc.reference(attrs, np.array([[2, 7]], np.int32))
    assert y.dtype == np.float64 and y.tolist() == [[1.5, -0.0]]


def _random_forest(rng, n_features, n_targets, depth, n_trees, member):
    """Full binary trees of random splits; every mode is used, BRANCH_MEMBER where `member`."""
    attrs = {k: [] for k in ("nodes_featureids", "nodes_modes", "nodes_splits", "nodes_truenodeids",
                             "nodes_falsenodeids", "nodes_trueleafs", "nodes_falseleafs",
                             "nodes_missing_value_tracks_true", "leaf_targetids", "leaf_weights", "tree_roots")}
    members = []
    for _ in range(n_trees):
        attrs["tree_roots"].append(len(attrs["nodes_modes"]))
        first = len(attrs["nodes_modes"])
        inner = 2 ** depth - 1
        for k in range(inner):
            mode = int(rng.integers(0, 7 if member else 6))
            attrs["nodes_modes"].append(mode)
            attrs["nodes_featureids"].append(int(rng.integers(0, n_features)))
            attrs["nodes_splits"].append(float(rng.integers(-2, 3)) if mode >= 4 else float(rng.standard_normal()))
            attrs["nodes_missing_value_tracks_true"].append(int(rng.integers(0, 2)))
            if mode == 6:
                members += [float(v) for v in rng.integers(-2, 3, 2)] + [np.nan]
            for side, child in (("true", 2 * k + 1), ("false", 2 * k + 2)):
                leaf = child >= inner
                attrs[f"nodes_{side}leafs"].append(int(leaf))
                attrs[f"nodes_{side}nodeids"].append(len(attrs["leaf_weights"]) + child - inner if leaf else first + child)
        for _ in range(inner + 1):
            attrs["leaf_targetids"].append(int(rng.integers(0, n_targets)))
            attrs["leaf_weights"].append(float(rng.standard_normal()))
    return attrs, members


def _forest_node(aggregate, post, dtype, member, seed):
    rng = np.random.default_rng(seed)
    attrs, members = _random_forest(rng, n_features=5, n_targets=3, depth=3, n_trees=4, member=member)

    def tensor(name, values, dt):
        return numpy_helper.from_array(np.array(values, dt), name)

    return helper.make_node(
        "TreeEnsemble", ["x"], ["y"], domain=ML, n_targets=3, aggregate_function=aggregate, post_transform=post,
        nodes_modes=tensor("m", attrs.pop("nodes_modes"), np.uint8),
        nodes_splits=tensor("s", attrs.pop("nodes_splits"), dtype),
        leaf_weights=tensor("w", attrs.pop("leaf_weights"), dtype),
        **({"membership_values": tensor("mv", members, dtype)} if members else {}), **attrs)


def _features(dtype, seed=0):
    x = np.random.default_rng(seed).integers(-2, 3, (13, 5)).astype(dtype)
    x[0, :] = np.nan
    return x


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
@pytest.mark.parametrize("dtype,member", [(np.float32, True), (np.float64, False)])
def test_tree_ensemble(aggregate, dtype, member):
    node = _forest_node(aggregate, 0, dtype, member, seed=aggregate)
    check_vs_ort(node, {"x": _features(dtype)}, CODES[np.dtype(dtype)])


def test_tree_ensemble_post_transforms():
    """SOFTMAX=1, LOGISTIC=2 as the spec numbers them (onnxruntime 1.32 swaps the two)."""
    from statistics import NormalDist

    x = _features(np.float64)
    op = get_op("ml.tree_ensemble")

    def scores(post):
        mod = from_onnx(helper.make_model(helper.make_graph(
            [_forest_node(1, post, np.float64, False, seed=5)], "g", [helper.make_tensor_value_info("x", 11, x.shape)],
            [helper.make_tensor_value_info("y", 11, [13, 3])]), ir_version=10,
            opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(ML, 5)]))
        assert mod.main.body.fields[0].op is op
        return evaluate(mod, {"x": x})[0]

    raw = scores(0)
    e = np.exp(raw - raw.max(1, keepdims=True))
    np.testing.assert_allclose(scores(1), e / e.sum(1, keepdims=True))
    np.testing.assert_allclose(scores(2), 1 / (1 + np.exp(-raw)))
    ez = np.where(raw != 0, np.exp(raw - raw.max(1, keepdims=True)), 0)
    np.testing.assert_allclose(scores(3), ez / ez.sum(1, keepdims=True))
    inside = (raw > 0) & (raw < 1)
    quantile = np.vectorize(NormalDist().inv_cdf)(np.where(inside, raw, 0.5))
    np.testing.assert_allclose(scores(4), np.where(inside, quantile, np.where(raw == 0, -np.inf, np.nan)))


def test_type_relations():
    n = SizeVar("N")
    x = Var("x", TensorType((n, 4), "float32"))
    assert get_op("ml.array_feature_extractor")(x, Var("i", TensorType((1, 3), "int64"))).type == \
        TensorType((n, 3), "float32")
    assert get_op("ml.array_feature_extractor")(Var("v", TensorType((4,), "int32")),
                                                Var("i", TensorType((n,), "int64"))).type == TensorType((1, ANY), "int32")
    enc = get_op("ml.label_encoder")(Var("s", TensorType((n,), "string")),
                                     attrs=LabelEncoderAttrs(keys_strings=("a",), values_floats=(1.0,)))
    assert enc.type == TensorType((n,), "float32")
    with pytest.raises(TypeInferenceError, match="keys' dtype"):
        get_op("ml.label_encoder")(x, attrs=LabelEncoderAttrs(keys_strings=("a",), values_floats=(1.0,)))
    with pytest.raises(TypeInferenceError, match="exactly one"):
        get_op("ml.label_encoder")(x, attrs=LabelEncoderAttrs(keys_floats=(1.0,)))
    with pytest.raises(TypeInferenceError, match="dtype"):
        get_op("ml.binarizer")(Var("b", TensorType((2,), "bool")))
