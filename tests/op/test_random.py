"""Random generators: exact shapes and dtypes, seeds, and the sampled distributions."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from kiln.errors import TypeInferenceError
from kiln.frontend.onnx import from_onnx
from kiln.ir import SizeVar, TensorType, Var
from kiln.op import get_op
from kiln.op.interpreter import evaluate, run_op
from kiln.op.random import BernoulliAttrs, MultinomialAttrs, RandomNormalAttrs, RandomUniformAttrs

N = SizeVar("N")


def sample(op: str, attrs, *args):
    return run_op(get_op(op), attrs, list(args))


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("shape", [(), (1,), (7, 1, 3)])
def test_normal_and_uniform_shapes(dtype, shape):
    for op, attrs in (("random.random_normal", RandomNormalAttrs(shape, dtype)),
                      ("random.random_uniform", RandomUniformAttrs(shape, dtype))):
        assert get_op(op)(attrs=attrs).type == TensorType(shape, dtype)
        y = sample(op, attrs)
        assert y.shape == shape and y.dtype == np.dtype(dtype)


def test_seed_reproduces_and_distinguishes():
    a = sample("random.random_normal", RandomNormalAttrs((50,), seed=1.0))
    np.testing.assert_array_equal(a, sample("random.random_normal", RandomNormalAttrs((50,), seed=1.0)))
    assert not np.array_equal(a, sample("random.random_normal", RandomNormalAttrs((50,), seed=1.5)))
    assert not np.array_equal(sample("random.random_uniform", RandomUniformAttrs((50,))),
                              sample("random.random_uniform", RandomUniformAttrs((50,))))


def test_distributions():
    n = sample("random.random_normal", RandomNormalAttrs((20000,), "float64", mean=3.0, scale=0.5, seed=0.0))
    assert abs(n.mean() - 3.0) < 0.02 and abs(n.std() - 0.5) < 0.02
    u = sample("random.random_uniform", RandomUniformAttrs((20000,), "float64", high=5.0, low=-1.0, seed=0.0))
    assert u.min() >= -1.0 and u.max() < 5.0 and abs(u.mean() - 2.0) < 0.05
    p = np.array([0.0, 1.0, 0.25], np.float32)
    b = sample("random.bernoulli", BernoulliAttrs(seed=2.0), np.broadcast_to(p, (20000, 3)).copy())
    assert b.dtype == np.float32 and b[:, 0].sum() == 0 and b[:, 1].all() and abs(b[:, 2].mean() - 0.25) < 0.02


def test_like_ops_follow_input_or_dtype_attribute():
    x = Var("x", TensorType((N, 3), "float16"))
    like = get_op("random.random_uniform_like")
    assert like(x).type == TensorType((N, 3), "float16")
    assert like(x, dtype="float64").type == TensorType((N, 3), "float64")
    assert get_op("random.random_normal_like")(x).type == TensorType((N, 3), "float16")
    assert get_op("random.bernoulli")(x, dtype="bool").type == TensorType((N, 3), "bool")
    y = sample("random.random_normal_like", get_op("random.random_normal_like").attrs_type(seed=3.0),
               np.zeros((2, 5), np.float16))
    assert y.shape == (2, 5) and y.dtype == np.float16
    with pytest.raises(TypeInferenceError, match="dtype"):
        like(Var("i", TensorType((2,), "int32")))
    with pytest.raises(TypeInferenceError, match="dtype"):
        get_op("random.bernoulli")(Var("i", TensorType((2,), "int64")))


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_multinomial(dtype):
    logits = np.log(np.array([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5], [1.0, 1e-9, 1e-9]], np.float64) + 1e-300)
    attrs = MultinomialAttrs(dtype, sample_size=4000, seed=4.0)
    x = Var("x", TensorType((N, 3), "float64"))
    assert get_op("random.multinomial")(x, attrs=attrs).type == TensorType((N, 4000), dtype)
    y = sample("random.multinomial", attrs, logits)
    assert y.shape == (3, 4000) and y.dtype == np.dtype(dtype)
    assert (y[0] == 1).all() and (y[2] == 0).all() and set(np.unique(y[1])) == {0, 2}
    assert abs((y[1] == 0).mean() - 0.5) < 0.05
    with pytest.raises(TypeInferenceError, match="batch"):
        get_op("random.multinomial")(Var("v", TensorType((3,), "float32")), attrs=attrs)


def test_onnx_import_maps_dtype_codes():
    nodes = [helper.make_node("RandomUniform", [], ["u"], shape=[2, 3], dtype=TensorProto.DOUBLE, seed=1.0),
             helper.make_node("Multinomial", ["x"], ["m"], sample_size=5, dtype=TensorProto.INT64),
             helper.make_node("Bernoulli", ["x"], ["b"], dtype=TensorProto.INT32)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3])],
                          [helper.make_tensor_value_info(n, t, None) for n, t in
                           (("u", TensorProto.DOUBLE), ("m", TensorProto.INT64), ("b", TensorProto.INT32))])
    for o in g.output:
        o.type.tensor_type.shape.SetInParent()
    mod = from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=10))
    u, m, b = evaluate(mod, {"x": np.full((4, 3), 0.5, np.float32)})
    assert (u.shape, u.dtype, m.shape, m.dtype, b.shape, b.dtype) == \
        ((2, 3), np.float64, (4, 5), np.int64, (4, 3), np.int32)
