"""FoldScaleAxis: per-channel scales/shifts folded into conv / matmul / gemm weights and biases."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.ir import Call, Constant, Function, IRModule, SizeVar, TensorType, Var, post_order
from kiln.op.registry import get_op as op
from kiln.transform import PASSES, Sequential
from kiln.transform.fold_scale_axis import fold_scale_axis
from kiln.transform.simplify_inference import simplify_inference
from tests.transform.golden import assert_golden, run_pass

PASS = fold_scale_axis


def unchanged(src: str):
    before = kiln.ir.parse(src)
    assert kiln.ir.structural_equal(run_pass(PASS, before), before)


def check_same(before: IRModule, after: IRModule, feeds: dict, rtol=1e-5):
    for a, b in zip(kiln.evaluate(before, feeds), kiln.evaluate(after, feeds)):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(b, a, rtol=rtol, atol=1e-5)


def ops_in(mod: IRModule) -> list[str]:
    return [e.op.name for e in post_order(mod.main) if isinstance(e, Call) and not isinstance(e.op, Function)]


def test_conv_scale_then_shift_fold_into_weights_and_bias():
    assert_golden(PASS, """
def @main(%x: Tensor[(N, 2, 5, 5), float32]) -> Tensor[(N, 3, 5, 5), float32] {
  %0 = nn.conv(%x, [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]:float32(3, 2, 1, 1));
  %1 = math.mul(%0, [1.0, 2.0, 3.0]:float32(3, 1, 1));
  math.add([1.0, 0.0, -1.0]:float32(1, 3, 1, 1), %1)
}""", """
def @main(%x: Tensor[(N, 2, 5, 5), float32]) -> Tensor[(N, 3, 5, 5), float32] {
  nn.conv(%x, [1.0, 1.0, 2.0, 2.0, 3.0, 3.0]:float32(3, 2, 1, 1), [1.0, 0.0, -1.0]:float32(3,))
}""")


def test_conv_with_bias_and_scalar_scale():
    assert_golden(PASS, """
def @main(%x: Tensor[(1, 1, 3, 3), float32]) -> Tensor[(1, 2, 3, 3), float32] {
  %0 = nn.conv(%x, [1.0, 2.0]:float32(2, 1, 1, 1), [0.5, 1.0]:float32(2,));
  math.mul(%0, [2.0]:float32())
}""", """
def @main(%x: Tensor[(1, 1, 3, 3), float32]) -> Tensor[(1, 2, 3, 3), float32] {
  nn.conv(%x, [2.0, 4.0]:float32(2, 1, 1, 1), [1.0, 2.0]:float32(2,))
}""")


@pytest.mark.parametrize("src", [
    # the conv has another consumer: folding would compute it twice
    """def @main(%x: Tensor[(1, 1, 3, 3), float32]) -> (Tensor[(1, 2, 3, 3), float32], Tensor[(1, 2, 3, 3), float32]) {
  %0 = nn.conv(%x, [1.0, 2.0]:float32(2, 1, 1, 1));
  (math.mul(%0, [2.0, 3.0]:float32(2, 1, 1)), %0)
}""",
    # the scale varies along a spatial axis
    """def @main(%x: Tensor[(1, 1, 3, 3), float32]) -> Tensor[(1, 2, 3, 3), float32] {
  %0 = nn.conv(%x, [1.0, 2.0]:float32(2, 1, 1, 1));
  math.mul(%0, [1.0, 2.0, 3.0]:float32(3,))
}""",
    # the scale is along the channel axis of a different rank alignment (batch axis)
    """def @main(%x: Tensor[(2, 1, 3, 3), float32]) -> Tensor[(2, 2, 3, 3), float32] {
  %0 = nn.conv(%x, [1.0, 2.0]:float32(2, 1, 1, 1));
  math.mul(%0, [1.0, 2.0]:float32(2, 1, 1, 1))
}""",
    # weights are not constants
    """def @main(%x: Tensor[(1, 1, 3, 3), float32], %w: Tensor[(2, 1, 1, 1), float32]) -> Tensor[(1, 2, 3, 3), float32] {
  %0 = nn.conv(%x, %w);
  math.mul(%0, [1.0, 2.0]:float32(2, 1, 1))
}""",
    # a runtime shift
    """def @main(%x: Tensor[(1, 1, 3, 3), float32], %t: Tensor[(2, 1, 1), float32]) -> Tensor[(1, 2, 3, 3), float32] {
  %0 = nn.conv(%x, [1.0, 2.0]:float32(2, 1, 1, 1));
  math.add(%0, %t)
}""",
    # a backward scale that is not per input channel
    """def @main(%x: Tensor[(1, 1, 3, 3), float32]) -> Tensor[(1, 2, 3, 3), float32] {
  %0 = math.mul(%x, [1.0, 2.0, 3.0]:float32(3,));
  nn.conv(%0, [1.0, 2.0]:float32(2, 1, 1, 1))
}""",
    # a backward scale that broadcasts x to a bigger shape
    """def @main(%x: Tensor[(1, 1, 3, 3), float32]) -> Tensor[(1, 2, 3, 3), float32] {
  %0 = math.mul(%x, [1.0, 2.0]:float32(2, 1, 1));
  %1 = nn.conv(%0, [1.0, 2.0, 3.0, 4.0]:float32(2, 2, 1, 1));
  %1
}""",
])
def test_cases_left_alone(src):
    unchanged(src)


def test_matmul_and_gemm():
    assert_golden(PASS, """
def @main(%x: Tensor[(N, 2), float32], %a: Tensor[(3, 2), float32]) -> (Tensor[(N, 3), float32], Tensor[(3, 2), float32]) {
  %0 = linalg.mat_mul(%x, [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]:float32(2, 3));
  %1 = math.mul(%0, [1.0, 2.0, 3.0]:float32(3,));
  %2 = linalg.gemm(%a, [1.0, 1.0, 1.0, 1.0]:float32(2, 2), [1.0, 1.0]:float32(2,), beta=2.0, transB=1);
  %3 = math.mul(%2, [2.0, 3.0]:float32(1, 2));
  %4 = math.add(%3, [1.0]:float32());
  (%1, %4)
}""", """
def @main(%x: Tensor[(N, 2), float32], %a: Tensor[(3, 2), float32]) -> (Tensor[(N, 3), float32], Tensor[(3, 2), float32]) {
  %0 = linalg.mat_mul(%x, [1.0, 2.0, 3.0, 1.0, 2.0, 3.0]:float32(2, 3));
  %1 = linalg.gemm(%a, [2.0, 2.0, 3.0, 3.0]:float32(2, 2), [5.0, 7.0]:float32(2,), transB=1);
  (%0, %1)
}""")


def test_backward_scale_into_conv_and_matmul():
    assert_golden(PASS, """
def @main(%x: Tensor[(N, 2, 4, 4), float32], %y: Tensor[(N, 5, 2), float32]) -> (Tensor[(N, 1, 4, 4), float32], Tensor[(N, 5, 1), float32]) {
  %0 = math.mul(%x, [2.0, 3.0]:float32(1, 2, 1, 1));
  %1 = nn.conv(%0, [1.0, 1.0]:float32(1, 2, 1, 1), [0.5]:float32(1,));
  %2 = math.mul([2.0, 3.0]:float32(2,), %y);
  %3 = linalg.mat_mul(%2, [1.0, 1.0]:float32(2, 1));
  (%1, %3)
}""", """
def @main(%x: Tensor[(N, 2, 4, 4), float32], %y: Tensor[(N, 5, 2), float32]) -> (Tensor[(N, 1, 4, 4), float32], Tensor[(N, 5, 1), float32]) {
  %0 = nn.conv(%x, [2.0, 3.0]:float32(1, 2, 1, 1), [0.5]:float32(1,));
  %1 = linalg.mat_mul(%y, [2.0, 3.0]:float32(2, 1));
  (%0, %1)
}""")


def _conv_block(rng, n_sym, c_in, c_out, group, k, stride, pad, backward):
    x = Var("x", TensorType((n_sym, c_in, 7, 5), "float32"))
    w = Constant(rng.standard_normal((c_out, c_in // group, k, k)).astype(np.float32))
    b = Constant(rng.standard_normal((c_out,)).astype(np.float32))
    inp = x
    if backward:
        inp = op("math.mul")(x, Constant(rng.uniform(-2, 2, (c_in, 1, 1)).astype(np.float32)))
    y = op("nn.conv")(inp, w, b, group=group, pads=(pad,) * 4, strides=(stride, stride))
    y = op("math.mul")(y, Constant(rng.uniform(-2, 2, (1, c_out, 1, 1)).astype(np.float32)))
    y = op("math.add")(y, Constant(rng.standard_normal((c_out, 1, 1)).astype(np.float32)))
    return IRModule({"main": Function((x,), op("nn.relu")(y))})


@pytest.mark.parametrize("c_in, c_out, group, k, stride, pad, backward", [
    (1, 1, 1, 1, 1, 0, False), (3, 5, 1, 3, 2, 1, True), (6, 4, 2, 3, 1, 1, True), (7, 7, 7, 3, 1, 2, True),
])
def test_conv_differential(c_in, c_out, group, k, stride, pad, backward):
    rng = np.random.default_rng(c_in * 10 + c_out)
    before = _conv_block(rng, SizeVar("N"), c_in, c_out, group, k, stride, pad, backward)
    after = run_pass(PASS, before)
    assert ops_in(after) == ["nn.conv", "nn.relu"]
    check_same(before, after, {"x": rng.standard_normal((2, c_in, 7, 5)).astype(np.float32)})


def test_batch_norm_after_conv_becomes_conv_bias():
    rng = np.random.default_rng(3)
    x = Var("x", TensorType((SizeVar("N"), 3, 6, 6), "float32"))
    w = Constant(rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
    params = [Constant(rng.uniform(0.5, 1.5, 4).astype(np.float32)) for _ in range(4)]
    y = op("nn.batch_normalization")(op("nn.conv")(x, w, pads=(1, 1, 1, 1)), *params)
    before = IRModule({"main": Function((x,), op("nn.relu")(y))})
    after = run_pass(Sequential((simplify_inference, PASSES["fold-constant"], PASS)), before)
    assert ops_in(after) == ["nn.conv", "nn.relu"]
    check_same(before, after, {"x": rng.standard_normal((1, 3, 6, 6)).astype(np.float32)}, rtol=1e-4)


def test_long_chain_is_iterative():
    x = Var("x", TensorType((1, 2, 3, 3), "float32"))
    e = x
    w = Constant(np.full((2, 2, 1, 1), 0.5, np.float32))
    for _ in range(2000):
        e = op("math.mul")(op("nn.conv")(e, w), Constant(np.array([1.0, 2.0], np.float32).reshape(2, 1, 1)))
    after = run_pass(PASS, IRModule({"main": Function((x,), e)}))
    assert set(ops_in(after)) == {"nn.conv"}
