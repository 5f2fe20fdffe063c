"""CombineParallelConv2D and CombineParallelDense: golden and differential tests."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.ir import Constant, Function, IRModule, SizeVar, TensorType, Tuple, Var, parse
from kiln.op import get_op
from kiln.transform import PassContext
from kiln.transform.combine_parallel import combine_parallel_conv2d, combine_parallel_dense
from tests.transform.golden import assert_golden, run_pass

F32 = "float32"
TWO = {"combine_parallel_conv2d.min_num_branches": 2, "combine_parallel_dense.min_num_branches": 2}

THREE_CONVS = """
def @main(%x: Tensor[(n, 2, 4, 4), float32], %w: Tensor[(3, 2, 1, 1), float32]) -> (Tensor[(n, 1, 4, 4), float32], Tensor[(n, 2, 4, 4), float32], Tensor[(n, 3, 4, 4), float32]) {
  %0 = nn.conv(%x, [1.0, 2.0]:float32(1, 2, 1, 1), [0.5]:float32(1,));
  %1 = nn.conv(%x, [3.0, 4.0, 5.0, 6.0]:float32(2, 2, 1, 1), [1.5, 2.5]:float32(2,));
  %2 = nn.conv(%x, %w, [7.0, 8.0, 9.0]:float32(3,));
  (%0, %1, %2)
}
"""


def test_golden_three_convs() -> None:
    """Constant weights concatenate at compile time; a parameter weight through tensor.concat."""
    assert_golden(combine_parallel_conv2d, THREE_CONVS, """
def @main(%x: Tensor[(n, 2, 4, 4), float32], %w: Tensor[(3, 2, 1, 1), float32]) -> (Tensor[(n, 1, 4, 4), float32], Tensor[(n, 2, 4, 4), float32], Tensor[(n, 3, 4, 4), float32]) {
  %0 = tensor.concat([1.0, 2.0]:float32(1, 2, 1, 1), [3.0, 4.0, 5.0, 6.0]:float32(2, 2, 1, 1), %w, axis=0);
  %1 = nn.conv(%x, %0, [0.5, 1.5, 2.5, 7.0, 8.0, 9.0]:float32(6,));
  %2 = tensor.slice(%1, [0]:int64(1,), [1]:int64(1,), [1]:int64(1,));
  %3 = tensor.slice(%1, [1]:int64(1,), [3]:int64(1,), [1]:int64(1,));
  %4 = tensor.slice(%1, [3]:int64(1,), [6]:int64(1,), [1]:int64(1,));
  (%2, %3, %4)
}
""")


def test_golden_min_branches() -> None:
    """Three branches are fewer than a minimum of four: nothing changes."""
    assert_golden(combine_parallel_conv2d, THREE_CONVS, THREE_CONVS,
                  config={"combine_parallel_conv2d.min_num_branches": 4})


def test_golden_different_attrs_or_inputs_stay_apart() -> None:
    before = """
def @main(%x: Tensor[(1, 1, 4, 4), float32], %y: Tensor[(1, 1, 4, 4), float32]) -> (Tensor[(1, 1, 4, 4), float32], Tensor[(1, 1, 2, 2), float32], Tensor[(1, 1, 4, 4), float32], Tensor[(1, 1, 4, 4), float32]) {
  %0 = nn.conv(%x, [1.0]:float32(1, 1, 1, 1));
  %1 = nn.conv(%x, [2.0]:float32(1, 1, 1, 1), strides=(2, 2));
  %2 = nn.conv(%y, [3.0]:float32(1, 1, 1, 1));
  %3 = nn.conv(%x, [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]:float32(1, 1, 3, 3), pads=(1, 1, 1, 1));
  (%0, %1, %2, %3)
}
"""
    assert_golden(combine_parallel_conv2d, before, before, config=TWO)


def test_golden_gemm_with_bias() -> None:
    assert_golden(combine_parallel_dense, """
def @main(%x: Tensor[(b, 2), float32]) -> (Tensor[(b, 1), float32], Tensor[(b, 2), float32]) {
  %0 = linalg.gemm(%x, [1.0, 2.0]:float32(1, 2), [0.5]:float32(1,), transB=1);
  %1 = linalg.gemm(%x, [3.0, 4.0, 5.0, 6.0]:float32(2, 2), [1.5, 2.5]:float32(2,), transB=1);
  (%0, %1)
}
""", """
def @main(%x: Tensor[(b, 2), float32]) -> (Tensor[(b, 1), float32], Tensor[(b, 2), float32]) {
  %0 = linalg.gemm(%x, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]:float32(3, 2), [0.5, 1.5, 2.5]:float32(3,), transB=1);
  %1 = tensor.slice(%0, [0]:int64(1,), [1]:int64(1,), [1]:int64(1,));
  %2 = tensor.slice(%0, [1]:int64(1,), [3]:int64(1,), [1]:int64(1,));
  (%1, %2)
}
""", config=TWO)


def test_golden_matmul_batched() -> None:
    assert_golden(combine_parallel_dense, """
def @main(%x: Tensor[(b, 3, 2), float32]) -> (Tensor[(b, 3, 1), float32], Tensor[(b, 3, 2), float32]) {
  %0 = linalg.mat_mul(%x, [1.0, 2.0]:float32(2, 1));
  %1 = linalg.mat_mul(%x, [3.0, 4.0, 5.0, 6.0]:float32(2, 2));
  (%0, %1)
}
""", """
def @main(%x: Tensor[(b, 3, 2), float32]) -> (Tensor[(b, 3, 1), float32], Tensor[(b, 3, 2), float32]) {
  %0 = linalg.mat_mul(%x, [1.0, 3.0, 4.0, 2.0, 5.0, 6.0]:float32(2, 3));
  %1 = tensor.slice(%0, [0]:int64(1,), [1]:int64(1,), [2]:int64(1,));
  %2 = tensor.slice(%0, [1]:int64(1,), [3]:int64(1,), [2]:int64(1,));
  (%1, %2)
}
""", config=TWO)


# ---------------------------------------------------------------------------------------------
# differential


def _rand(rng, *shape):
    return (rng.standard_normal(shape) * 0.5).astype(np.float32)


def _same_outputs(mod, out, feeds):
    want, got = kiln.evaluate(mod, feeds), kiln.evaluate(out, feeds)
    assert len(want) == len(got)
    for w, g in zip(want, got):
        assert w.shape == g.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def _conv_module(seed: int):
    rng = np.random.default_rng(seed)
    c = int(rng.choice([1, 2, 3, 5, 7]))
    n = SizeVar("n") if seed % 2 else 2
    x = Var("x", TensorType((n, c, 7, 5), F32))
    base = get_op("nn.relu")(x)
    outs = []
    k = int(rng.choice([1, 3]))
    geo = {"pads": (k // 2,) * 4, "strides": (1, int(rng.integers(1, 3)))}
    for _ in range(int(rng.integers(2, 6))):
        o = int(rng.choice([1, 2, 3, 5, 7, 13]))
        bias = (Constant(_rand(rng, o)),) if seed % 3 else ()
        y = get_op("nn.conv")(base, Constant(_rand(rng, o, c, k, k)), *bias, **geo)
        outs.append(get_op("nn.relu")(y) if rng.random() < 0.5 else y)
    outs.append(get_op("nn.conv")(base, Constant(_rand(rng, 2, c, 1, 1))))  # a different kernel
    feeds = {"x": _rand(rng, 2, c, 7, 5)}
    return IRModule({"main": Function((x,), Tuple(tuple(outs)))}), feeds


@pytest.mark.parametrize("seed", range(16))
def test_random_parallel_convs_keep_meaning(seed: int) -> None:
    mod, feeds = _conv_module(seed)
    out = run_pass(combine_parallel_conv2d, mod, config=TWO)
    _same_outputs(mod, out, feeds)
    convs = [e for e in kiln.ir.post_order(out.main) if getattr(getattr(e, "op", None), "name", "") == "nn.conv"]
    assert len(convs) <= 3


def _dense_module(seed: int):
    rng = np.random.default_rng(seed)
    k = int(rng.choice([1, 2, 3, 5]))
    outs = []
    xm = Var("m", TensorType((SizeVar("b"), 3, k), F32))
    for _ in range(int(rng.integers(2, 5))):
        outs.append(get_op("linalg.mat_mul")(xm, Constant(_rand(rng, k, int(rng.choice([1, 2, 7]))))))
    xg = Var("g", TensorType((5, k), F32))
    alpha, beta, tb = float(rng.choice([1.0, 0.5])), float(rng.choice([1.0, 2.0])), int(rng.integers(2))
    for _ in range(int(rng.integers(2, 5))):
        nout = int(rng.choice([1, 3, 11]))
        w = Constant(_rand(rng, nout, k) if tb else _rand(rng, k, nout))
        c = (Constant(_rand(rng, nout) if seed % 2 else _rand(rng, 1, nout)),) if seed % 3 else ()
        outs.append(get_op("linalg.gemm")(xg, w, *c, alpha=alpha, beta=beta, transB=tb))
    feeds = {"m": _rand(rng, 2, 3, k), "g": _rand(rng, 5, k)}
    return IRModule({"main": Function((xm, xg), Tuple(tuple(outs)))}), feeds


@pytest.mark.parametrize("seed", range(16))
def test_random_parallel_dense_keeps_meaning(seed: int) -> None:
    mod, feeds = _dense_module(seed)
    out = run_pass(combine_parallel_dense, mod, config=TWO)
    _same_outputs(mod, out, feeds)
    ops = [getattr(getattr(e, "op", None), "name", "") for e in kiln.ir.post_order(out.main)]
    assert ops.count("linalg.mat_mul") == 1 and ops.count("linalg.gemm") == 1


def test_default_minimum_is_three() -> None:
    mod, feeds = _dense_module(5)
    with PassContext(opt_level=3):
        out = combine_parallel_dense(mod)
    _same_outputs(mod, out, feeds)
    with PassContext(opt_level=2):
        assert combine_parallel_dense(mod) is mod


def test_branches_inside_if_stay_in_their_scope() -> None:
    x = Var("x", TensorType((1, 2, 3, 3), F32))
    cond = Var("c", TensorType((), "bool"))
    w = [Constant(np.full((o, 2, 1, 1), o, np.float32)) for o in (1, 2)]
    inside = Tuple((get_op("nn.conv")(x, w[0]), get_op("nn.conv")(x, w[1])))
    outside = Tuple((get_op("nn.conv")(x, w[0]), get_op("nn.conv")(x, w[1])))
    body = kiln.ir.If(cond, inside, outside)
    mod = IRModule({"main": Function((x, cond), body)})
    out = run_pass(combine_parallel_conv2d, mod, config=TWO)
    for c in (True, False):
        _same_outputs(mod, out, {"x": _rand(np.random.default_rng(0), 1, 2, 3, 3), "c": np.array(c)})
    assert kiln.ir.text(out).count("nn.conv(") == 2


def test_deep_chain_no_recursion() -> None:
    x = Var("x", TensorType((1, 2, 3, 3), F32))
    y = x
    for _ in range(10_000):
        y = get_op("nn.relu")(y)
    outs = Tuple(tuple(get_op("nn.conv")(y, Constant(np.ones((o, 2, 1, 1), np.float32))) for o in (1, 2, 3)))
    with PassContext(opt_level=3):
        out = combine_parallel_conv2d(IRModule({"main": Function((x,), outs)}))
    assert [f.op.name for f in out.main.body.fields] == ["tensor.slice"] * 3


def test_parses_back() -> None:
    out = run_pass(combine_parallel_conv2d, parse(THREE_CONVS))
    assert kiln.ir.structural_equal(parse(kiln.ir.text(out)), out)
