"""The per-anchor default schedules (conv, dense, reductions): compiled groups against the
interpreter on odd shapes, and the dispatcher picking the anchor's schedule rather than the
generic one."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.ir import Constant, Function, IRModule, SizeVar, TensorType, Var
from kiln.op import get_op
from tests.topi.conftest import SCHEDULE_TEST

pytestmark = SCHEDULE_TEST
F32 = "float32"
rng = np.random.default_rng(0)


def _w(*shape) -> Constant:
    return Constant(rng.standard_normal(shape).astype(np.float32))


def _check(params: list[Var], body, feeds: dict[str, np.ndarray], opt_level: int = 2) -> None:
    mod = IRModule({"main": Function(tuple(params), body)})
    got = kiln.build(mod, opt_level=opt_level).run(feeds)
    want = kiln.evaluate(mod, feeds)
    for g, r in zip(got, want):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4)


def _conv_group(xshape, wshape, **attrs):
    """conv + bias, times a per-channel scale (folded batch norm)."""
    x = Var("x", TensorType(xshape, F32))
    y = get_op("nn.conv")(x, _w(*wshape), _w(wshape[0]), **attrs)
    return x, get_op("math.mul")(y, _w(wshape[0], *([1] * (len(xshape) - 2))))


CONVS = [  # (x shape, w shape, attrs)
    ((1, 3, 13, 11), (5, 3, 3, 3), dict(pads=(1, 1, 1, 1))),
    ((2, 8, 9, 17), (16, 8, 1, 1), {}),
    ((1, 6, 15, 15), (6, 1, 3, 3), dict(group=6, pads=(1, 1, 1, 1))),  # depthwise
    ((1, 8, 14, 10), (12, 4, 3, 3), dict(group=2, strides=(2, 2), pads=(0, 1, 2, 1))),
    ((1, 4, 16, 19), (7, 4, 3, 2), dict(dilations=(2, 3), pads=(2, 0, 1, 3))),
    ((1, 5, 1, 1), (1, 5, 1, 1), {}),  # narrow maps: one unrolled block
    ((1, 3, 7, 7), (2, 3, 7, 7), dict(strides=(3, 3), pads=(3, 3, 3, 3))),
    ((1, 2, 40, 5), (3, 2, 3, 3), dict(pads=(1, 1, 1, 1))),  # narrow but too tall to unroll
    ((2, 4, 23), (9, 4, 5), dict(pads=(2, 2), strides=(2,))),  # 1-D
]


@pytest.mark.parametrize("xs, ws, attrs", CONVS)
def test_conv_schedule_matches_interpreter(claimed, xs, ws, attrs):
    x, y = _conv_group(xs, ws, **attrs)
    _check([x], y, {"x": rng.standard_normal(xs).astype(np.float32)}, opt_level=1)  # NCHW: no alter-op-layout
    assert "schedule_conv" in claimed


def test_conv_with_residual_relu_and_symbolic_batch(claimed):
    n = SizeVar("n")
    x, y = _conv_group((n, 6, 10, 21), (11, 6, 3, 3), pads=(1, 1, 1, 1))
    r = Var("r", TensorType((n, 11, 10, 21), F32))
    y = get_op("nn.relu")(get_op("math.add")(y, r))
    for n in (1, 3):
        feeds = {"x": rng.standard_normal((n, 6, 10, 21)).astype(np.float32),
                 "r": rng.standard_normal((n, 11, 10, 21)).astype(np.float32)}
        _check([x, r], y, feeds, opt_level=1)
    assert "schedule_conv" in claimed


def _gemm(ashape, bshape, cshape=None, **attrs):
    a = Var("a", TensorType(ashape, F32))
    y = get_op("linalg.gemm")(a, _w(*bshape), *([_w(*cshape)] if cshape else []), **attrs)
    return a, get_op("nn.relu")(y)


@pytest.mark.parametrize("ashape, bshape, cshape, attrs", [
    ((1, 37), (37, 13), (13,), {}),
    ((5, 64), (33, 64), (33,), dict(transB=1)),  # weights read across rows: k stays contiguous
    ((7, 1), (1, 40), (7, 40), dict(alpha=0.5, beta=2.0)),
    ((9, 3), (11, 9), None, dict(transA=1, transB=1)),
])
def test_gemm_schedule_matches_interpreter(claimed, ashape, bshape, cshape, attrs):
    a, y = _gemm(ashape, bshape, cshape, **attrs)
    _check([a], y, {"a": rng.standard_normal(ashape).astype(np.float32)})
    assert {"schedule_dense", "schedule_dense_packed"} & set(claimed)  # constant B: packed


@pytest.mark.parametrize("ashape, bshape", [
    ((3, 5, 17), (17, 29)), ((2, 1, 4, 6), (3, 6, 9)), ((13,), (13, 7)), ((4, 13), (13,)), ((6,), (6,)),
])
def test_mat_mul_schedule_matches_interpreter(ashape, bshape):
    a, b = Var("a", TensorType(ashape, F32)), Var("b", TensorType(bshape, F32))
    y = get_op("math.add")(get_op("linalg.mat_mul")(a, b), Constant(np.float32(1.5)))
    _check([a, b], y, {"a": rng.standard_normal(ashape).astype(np.float32),
                       "b": rng.standard_normal(bshape).astype(np.float32)})


def test_mat_mul_with_symbolic_rows(claimed):
    a = Var("a", TensorType((SizeVar("n"), 19), F32))
    y = get_op("linalg.mat_mul")(a, _w(19, 45))
    for n in (1, 6):
        _check([a], y, {"a": rng.standard_normal((n, 19)).astype(np.float32)})
    assert {"schedule_dense", "schedule_dense_packed"} & set(claimed)  # constant B: packed


POOLS = [
    ("nn.max_pool", dict(kernel_shape=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1)), (1, 3, 17, 23)),
    ("nn.average_pool", dict(kernel_shape=(2, 3), strides=(1, 2), pads=(0, 1, 1, 0)), (2, 4, 9, 31)),
    ("nn.average_pool", dict(kernel_shape=(3, 3), ceil_mode=1, strides=(2, 2)), (1, 2, 10, 10)),
    ("nn.global_average_pool", {}, (1, 13, 7, 9)),
]


@pytest.mark.parametrize("op, attrs, shape", POOLS)
def test_pool_schedules_match_interpreter(claimed, op, attrs, shape):
    x = Var("x", TensorType(shape, F32))
    y = get_op(op)(x, **attrs)
    y = y if op != "nn.max_pool" else kiln.ir.TupleGetItem(y, 0)
    _check([x], get_op("nn.relu")(y), {"x": rng.standard_normal(shape).astype(np.float32)})
    assert "schedule_reduce" in claimed


@pytest.mark.parametrize("shape, axes, kind", [
    ((5, 40, 3), (1,), "sum"), ((2, 9, 33), (0, 2), "max"), ((3, 70), (0,), "mean"), ((17,), (0,), "sum"),
])
def test_reductions_match_interpreter(shape, axes, kind):
    x = Var("x", TensorType(shape, F32))
    y = get_op(f"reduce.{kind}")(x, Constant(np.array(axes, np.int64)), keepdims=0)
    _check([x], get_op("math.exp")(y), {"x": rng.standard_normal(shape).astype(np.float32)})


@pytest.mark.parametrize("op, shape, attrs", [
    ("reduce.softmax", (3, 37), dict(axis=-1)), ("reduce.softmax", (4, 19, 5), dict(axis=1)),
    ("reduce.log_softmax", (2, 11), dict(axis=0)),
])
def test_softmax_matches_interpreter(op, shape, attrs):
    x = Var("x", TensorType(shape, F32))
    _check([x], get_op(op)(x, **attrs), {"x": rng.standard_normal(shape).astype(np.float32)})


def test_layer_norm_matches_interpreter():
    x = Var("x", TensorType((SizeVar("n"), 7, 24), F32))
    y = get_op("nn.layer_normalization")(x, _w(24), _w(24), axis=-1)
    y = kiln.ir.TupleGetItem(y, 0) if isinstance(y.type, kiln.ir.TupleType) else y
    for n in (1, 2):
        _check([x], y, {"x": rng.standard_normal((n, 7, 24)).astype(np.float32)})
