"""Normalizations and LRN: references against onnxruntime and plain numpy formulas, type relations
with symbolic dims and bad inputs, and the older-opset forms the frontend normalizes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from kiln.errors import ImportError_, TypeInferenceError
from kiln.frontend.onnx import from_onnx
from kiln.ir.types import SizeVar, TensorType, TupleType
from kiln.op import get_op
from kiln.op.interpreter import evaluate
from kiln.op.norm import BatchNormAttrs, LayerNormAttrs
from tests.op.test_nn import check_vs_ort, f32, infer, one_node_model, rand

N, L = SizeVar("N"), SizeVar("L")


def _std(x, axes, eps):
    m = x.mean(axis=axes, keepdims=True)
    return (x - m) / np.sqrt(x.var(axis=axes, keepdims=True) + eps)


# ---------------------------------------------------------------------------------------------
# batch normalization


@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (1, 1, 1), (3, 2), (2, 3, 2, 1, 2)])
def test_batch_norm_vs_ort(shape):
    c = shape[1]
    params = [rand(c), rand(c), rand(c), rand(c) ** 2 + 0.1]
    check_vs_ort("BatchNormalization", [rand(*shape)] + params, {"epsilon": 1e-3}, opset=15)


def test_batch_norm_training():
    x, scale, b, mean, var = rand(4, 3, 5), rand(3), rand(3), rand(3), rand(3) ** 2
    y, rm, rv = get_op("nn.batch_normalization").reference(
        BatchNormAttrs(epsilon=1e-4, momentum=0.8, training_mode=1), x, scale, b, mean, var)
    bm, bv = x.mean(axis=(0, 2)), x.var(axis=(0, 2))
    want = _std(x, (0, 2), 1e-4) * scale[:, None] + b[:, None]
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(rm, 0.8 * mean + 0.2 * bm, rtol=1e-5)
    np.testing.assert_allclose(rv, 0.8 * var + 0.2 * bv, rtol=1e-5)


def test_batch_norm_old_opsets():
    """Opset 6 meant training by is_test=0; spatial=0 and old training outputs are refused."""
    x, p = rand(2, 3, 4), [rand(3), rand(3), rand(3), rand(3) ** 2]
    inits = [numpy_helper.from_array(a, n) for a, n in zip(p, "sbmv")]
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], is_test=0)
    m = one_node_model(node, [("x", onnx.TensorProto.FLOAT, [2, 3, 4])], 6, inits)
    np.testing.assert_allclose(evaluate(from_onnx(m), {"x": x})[0], _std(x, (0, 2), 1e-5) * p[0][:, None]
                               + p[1][:, None], rtol=1e-4, atol=1e-5)
    five = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "a", "b2", "c", "d"])
    outs = [("y", onnx.TensorProto.FLOAT, [2, 3, 4])] + [(n, onnx.TensorProto.FLOAT, [3]) for n in five.output[1:]]
    with pytest.raises(ImportError_, match="training"):
        from_onnx(one_node_model(five, [("x", onnx.TensorProto.FLOAT, [2, 3, 4])], 9, inits, outputs=outs))
    spatial0 = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], spatial=0)
    with pytest.raises(ImportError_, match="spatial"):
        from_onnx(one_node_model(spatial0, [("x", onnx.TensorProto.FLOAT, [2, 3, 4])], 7, inits))


def test_batch_norm_types():
    c = f32(3)
    assert infer("nn.batch_normalization", f32(N, 3, L), c, c, c, c) == f32(N, 3, L)
    assert infer("nn.batch_normalization", f32(N, 3), c, c, c, c, training_mode=1) == \
        TupleType((f32(N, 3), c, c))
    with pytest.raises(TypeInferenceError, match="scale"):
        infer("nn.batch_normalization", f32(2, 4, 5), c, c, c, c)
    with pytest.raises(TypeInferenceError, match="dtype"):
        infer("nn.batch_normalization", TensorType((2, 3), "int32"), c, c, c, c)


# ---------------------------------------------------------------------------------------------
# instance, group, layer, RMS normalization


@pytest.mark.parametrize("shape", [(2, 3, 5, 7), (1, 4, 1), (2, 2, 3, 1, 2)])
def test_instance_norm_vs_ort(shape):
    check_vs_ort("InstanceNormalization", [rand(*shape), rand(shape[1]), rand(shape[1])], {"epsilon": 1e-3})


@pytest.mark.parametrize("shape, groups", [((2, 6, 5, 3), 3), ((1, 4, 7), 4), ((3, 5, 2), 1)])
def test_group_norm(shape, groups):
    x, s, b = rand(*shape), rand(shape[1]), rand(shape[1])
    y = check_vs_ort("GroupNormalization", [x, s, b], {"num_groups": groups, "epsilon": 1e-3}, opset=21,
                     outputs=[("out0", onnx.TensorProto.FLOAT, shape)])[0]
    g = x.reshape(shape[0], groups, -1)
    want = _std(g, (2,), 1e-3).reshape(shape) * s.reshape(-1, *[1] * (len(shape) - 2)) \
        + b.reshape(-1, *[1] * (len(shape) - 2))
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("axis", [0, 1, -1, 2])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_layer_norm_vs_ort(axis, dtype):
    x = rand(2, 3, 5, dtype=dtype)
    norm_shape = x.shape[axis:]
    check_vs_ort("LayerNormalization", [x, rand(*norm_shape, dtype=dtype), rand(*norm_shape, dtype=dtype)],
                 {"axis": axis, "epsilon": 1e-3}, n_out=3, opset=17)


def test_layer_norm_outputs_and_broadcast_scale():
    x, scale = rand(3, 4, 7), rand(7)
    y, mean, inv = get_op("nn.layer_normalization").reference(LayerNormAttrs(axis=1), x, scale)
    np.testing.assert_allclose(y, _std(x, (1, 2), 1e-5) * scale, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(mean, x.mean(axis=(1, 2), keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(inv, 1 / np.sqrt(x.var(axis=(1, 2), keepdims=True) + 1e-5), rtol=1e-4)
    assert mean.shape == (3, 1, 1) and mean.dtype == np.float32


def test_layer_norm_types():
    stat = TensorType((N, 1, 1), "float32")
    h = TensorType((N, L, 8), "float16")
    assert infer("nn.layer_normalization", h, TensorType((8,), "float16"), axis=-2) == \
        TupleType((h, stat, stat))
    assert infer("nn.layer_normalization", f32(N, L, 8), f32(8), stash_type="float64").fields[1] == \
        TensorType((N, L, 1), "float64")
    with pytest.raises(TypeInferenceError, match="broadcast"):
        infer("nn.layer_normalization", f32(N, L, 8), f32(7))
    with pytest.raises(TypeInferenceError, match="axis"):
        infer("nn.layer_normalization", f32(2, 3), f32(3), axis=2)


@pytest.mark.parametrize("axis", [0, -1, 1])
def test_rms_norm(axis):
    x = rand(2, 3, 5)
    scale = rand(*x.shape[axis:])
    axes = tuple(range(axis % 3, 3))
    want = x / np.sqrt((x * x).mean(axis=axes, keepdims=True) + 1e-5) * scale
    got = get_op("nn.rms_normalization").reference(LayerNormAttrs(axis=axis), x, scale)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert infer("nn.rms_normalization", f32(N, L, 5), f32(5)) == f32(N, L, 5)


# ---------------------------------------------------------------------------------------------
# Lp, mean-variance normalization, LRN


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [0, -1, 1])
def test_lp_norm_vs_ort(p, axis):
    x = rand(3, 4, 5)
    x[0, 0] = 0  # a zero vector along the last axis stays zero
    check_vs_ort("LpNormalization", [x], {"axis": axis, "p": p}, opset=1)


def test_lp_norm_zero_vector_and_errors():
    assert not get_op("nn.lp_normalization").reference(
        get_op("nn.lp_normalization").attrs_type(), np.zeros((2, 3), np.float32)).any()
    with pytest.raises(TypeInferenceError, match="p must"):
        infer("nn.lp_normalization", f32(2, 3), p=3)


@pytest.mark.parametrize("axes", [(0, 2, 3), (1,), (-1, 0)])
def test_mvn_vs_ort(axes):
    check_vs_ort("MeanVarianceNormalization", [rand(2, 3, 4, 5)], {"axes": list(axes)}, opset=13)


def test_mvn_errors():
    with pytest.raises(TypeInferenceError, match="repeat"):
        infer("nn.mean_variance_normalization", f32(2, 3, 4, 5), axes=(1, -3))
    with pytest.raises(TypeInferenceError, match="out of range"):
        infer("nn.mean_variance_normalization", f32(2, 3), axes=(0, 2, 3))


@pytest.mark.parametrize("size", [1, 3, 5])
def test_lrn_vs_ort(size):
    check_vs_ort("LRN", [rand(2, 7, 3, 4)], {"size": size, "alpha": 1e-2, "beta": 0.6, "bias": 1.5}, opset=13)


def test_lrn_even_size():
    """An even window takes one more channel after c than before it (ORT accepts only odd sizes)."""
    x = rand(1, 5, 2)
    got = get_op("nn.lrn").reference(get_op("nn.lrn").attrs_type(size=4, alpha=0.1), x)
    sq = [np.sum(x[:, max(0, c - 1):c + 3] ** 2, axis=1) for c in range(5)]
    np.testing.assert_allclose(got, x / (1 + 0.1 / 4 * np.stack(sq, axis=1)) ** 0.75, rtol=1e-5)


def test_lrn_types():
    assert infer("nn.lrn", f32(N, 3, L), size=3) == f32(N, 3, L)
    assert infer("nn.lrn", TensorType(None, "float64"), size=3) == TensorType(None, "float64")
    with pytest.raises(TypeInferenceError, match="size"):
        infer("nn.lrn", f32(1, 3, 4), size=0)
