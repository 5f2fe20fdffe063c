"""The training family: optimizer steps vs the ONNX pseudo-code in numpy (float64), grouping of
several tensors, and type relations."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.errors import TypeInferenceError
from kiln.ir.expr import Var
from kiln.ir.types import SizeVar, TensorType, TupleType
from kiln.op.interpreter import run_op
from kiln.op.registry import get_op

N = SizeVar("N")
RNG = np.random.default_rng(2)
SHAPES = [(3,), (2, 7), (1, 1, 5)]


def run(name: str, *args, **attrs):
    op = get_op(name)
    return run_op(op, op.attrs_type(**attrs), list(args))


def tensors(k: int, dtype=np.float64) -> list[list[np.ndarray]]:
    """k role groups (X, G, states...), one random tensor per shape in SHAPES; states are >= 0."""
    return [[np.abs(RNG.normal(size=s)).astype(dtype) if r > 1 else RNG.normal(size=s).astype(dtype)
             for s in SHAPES] for r in range(k)]


@pytest.mark.parametrize("t", [0, 3])
def test_adagrad(t):
    xs, gs, hs = tensors(3)
    a = {"decay_factor": 0.1, "epsilon": 1e-5, "norm_coefficient": 0.01}
    out = run("train.adagrad", np.array(0.2), np.array(t), *xs, *gs, *hs, **a)
    assert len(out) == 2 * len(SHAPES)
    for i, (x, g, h) in enumerate(zip(xs, gs, hs)):
        gr = 0.01 * x + g
        h_new = h + gr * gr
        np.testing.assert_allclose(out[i], x - 0.2 / (1 + t * 0.1) * gr / (np.sqrt(h_new) + 1e-5))
        np.testing.assert_allclose(out[len(SHAPES) + i], h_new)


@pytest.mark.parametrize("t", [0, 5])
def test_adam(t):
    xs, gs, vs, hs = tensors(4, np.float32)
    a = {"alpha": 0.8, "beta": 0.95, "epsilon": 1e-6, "norm_coefficient": 0.02, "norm_coefficient_post": 0.1}
    out = run("train.adam", np.array(0.1, np.float32), np.array(t), *xs, *gs, *vs, *hs, **a)
    assert all(o.dtype == np.float32 for o in out) and len(out) == 3 * len(SHAPES)
    for i, (x, g, v, h) in enumerate(zip(xs, gs, vs, hs)):
        gr = 0.02 * x + g
        v_new, h_new = 0.8 * v + 0.2 * gr, 0.95 * h + 0.05 * gr * gr
        lr = 0.1 * np.sqrt(1 - 0.95**t) / (1 - 0.8**t) if t else 0.1
        x_new = 0.9 * (x - lr * v_new / (np.sqrt(h_new) + 1e-6))
        for got, want in zip(out[i::len(SHAPES)], (x_new, v_new, h_new)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["standard", "nesterov"])
@pytest.mark.parametrize("t", [0, 1])
def test_momentum(mode, t):
    xs, gs, vs = tensors(3)
    out = run("train.momentum", np.array(0.05), np.array(t), *xs, *gs, *vs,
              alpha=0.9, beta=0.3, mode=mode, norm_coefficient=0.001)
    for i, (x, g, v) in enumerate(zip(xs, gs, vs)):
        gr = 0.001 * x + g
        v_new = 0.9 * v + (0.3 if t else 1.0) * gr
        step = gr + 0.9 * v_new if mode == "nesterov" else v_new
        np.testing.assert_allclose(out[i], x - 0.05 * step)
        np.testing.assert_allclose(out[len(SHAPES) + i], v_new)


def test_type_relations():
    r, t = Var("r", TensorType((), "float32")), Var("t", TensorType((), "int64"))
    x1, x2 = TensorType((N, 3), "float32"), TensorType((5,), "float64")
    vs = [Var(f"v{i}", ty) for i, ty in enumerate([x1, x2] * 4)]
    assert get_op("train.adam")(r, t, *vs).type == TupleType((x1, x2) * 3)
    assert get_op("train.adagrad")(r, t, *vs[:6]).type == TupleType((x1, x2) * 2)
    with pytest.raises(TypeInferenceError, match="groups"):
        get_op("train.adagrad")(r, t, *vs[:4])
    mom = {"alpha": 0.9, "beta": 0.1, "mode": "standard", "norm_coefficient": 0.0}
    with pytest.raises(TypeInferenceError, match="share a dtype"):
        get_op("train.momentum")(r, t, vs[0], vs[1], vs[0], **mom)
    with pytest.raises(TypeInferenceError, match="T has dtype"):
        get_op("train.adagrad")(r, r, vs[0], vs[0], vs[0])
    with pytest.raises(ValueError, match="mode"):
        get_op("train.momentum")(r, t, vs[0], vs[0], vs[0], **{**mom, "mode": "heavy"})
