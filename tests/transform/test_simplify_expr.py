"""SimplifyExpr: golden rewrites, the cases it must leave alone, and differential checks."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.ir import Constant, Function, IRModule, SizeVar, TensorType, Var
from kiln.op.registry import get_op as op
from kiln.transform.simplify_expr import exact_cast, simplify_expr
from tests.transform.golden import assert_golden, run_pass

SIMPLIFY = simplify_expr


def same_outputs(src: str, feeds: dict, rtol=1e-6) -> kiln.ir.IRModule:
    """Run the pass on `src`; outputs before and after agree on `feeds`."""
    before = kiln.ir.parse(src)
    after = run_pass(SIMPLIFY, before)
    for a, b in zip(kiln.evaluate(before, feeds), kiln.evaluate(after, feeds)):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_allclose(b, a, rtol=rtol)
    return after


def unchanged(src: str):
    before = kiln.ir.parse(src)
    assert kiln.ir.structural_equal(run_pass(SIMPLIFY, before), before)


def test_layout_chains_collapse():
    src = """
def @main(%x: Tensor[(N, 3, 4), float32]) -> Tensor[(N, 12), float32] {
  %0 = tensor.transpose(%x, perm=(0, 2, 1));
  %1 = tensor.transpose(%0, perm=(0, 2, 1));
  %2 = tensor.reshape(%1, [0, 4, 3]:int64(3,));
  %3 = tensor.reshape(%2, [0, -1]:int64(2,));
  %3
}"""
    assert_golden(SIMPLIFY, src, """
def @main(%x: Tensor[(N, 3, 4), float32]) -> Tensor[(N, 12), float32] {
  tensor.reshape(%x, [0, -1]:int64(2,))
}""")
    same_outputs(src, {"x": np.random.rand(5, 3, 4).astype(np.float32)})


def test_static_flatten_chain_and_composed_transpose():
    src = """
def @main(%x: Tensor[(2, 3, 5, 7), float32]) -> Tensor[(30, 7), float32] {
  %0 = tensor.transpose(%x, perm=(0, 2, 1, 3));
  %1 = tensor.transpose(%0, perm=(1, 0, 2, 3));
  %2 = tensor.flatten(%1, axis=3);
  %3 = tensor.reshape(%2, [30, 7]:int64(2,));
  %3
}"""
    assert_golden(SIMPLIFY, src, """
def @main(%x: Tensor[(2, 3, 5, 7), float32]) -> Tensor[(30, 7), float32] {
  %0 = tensor.transpose(%x, perm=(2, 0, 1, 3));
  tensor.reshape(%0, [30, 7]:int64(2,))
}""")
    same_outputs(src, {"x": np.random.rand(2, 3, 5, 7).astype(np.float32)})


def test_reshape_to_own_shape_and_default_transpose_pair():
    assert_golden(SIMPLIFY, """
def @main(%x: Tensor[(N, 3), float32]) -> Tensor[(N, 3), float32] {
  %0 = tensor.reshape(%x, [-1, 3]:int64(2,));
  %1 = tensor.transpose(%0);
  tensor.transpose(%1)
}""", """
def @main(%x: Tensor[(N, 3), float32]) -> Tensor[(N, 3), float32] {
  %x
}""")


def test_squeeze_unsqueeze_pairs():
    src = """
def @main(%x: Tensor[(3, 1, 5), float32]) -> (Tensor[(3, 1, 5), float32], Tensor[(3, 1, 5), float32]) {
  %0 = tensor.unsqueeze(%x, [0, -1]:int64(2,));
  %1 = tensor.squeeze(%0, [4, 0]:int64(2,));
  %2 = tensor.squeeze(%x, [1]:int64(1,));
  %3 = tensor.unsqueeze(%2, [-2]:int64(1,));
  (%1, %3)
}"""
    assert_golden(SIMPLIFY, src, """
def @main(%x: Tensor[(3, 1, 5), float32]) -> (Tensor[(3, 1, 5), float32], Tensor[(3, 1, 5), float32]) {
  (%x, %x)
}""")
    # different axes: the pair moves a unit dim, which is not a no-op
    unchanged("""
def @main(%x: Tensor[(3, 1, 5), float32]) -> Tensor[(3, 5, 1), float32] {
  %0 = tensor.squeeze(%x, [1]:int64(1,));
  tensor.unsqueeze(%0, [2]:int64(1,))
}""")


def test_neutral_constants_drop():
    src = """
def @main(%x: Tensor[(N, 4), float32]) -> Tensor[(N, 4), float32] {
  %0 = math.mul([1.0]:float32(1,), %x);
  %1 = math.add(%0, [0.0, 0.0, 0.0, 0.0]:float32(4,));
  %2 = math.sub(%1, [0.0]:float32(1, 1));
  %3 = math.div(%2, [1.0]:float32());
  math.add([0.0]:float32(), %3)
}"""
    assert_golden(SIMPLIFY, src, """
def @main(%x: Tensor[(N, 4), float32]) -> Tensor[(N, 4), float32] {
  %x
}""")


@pytest.mark.parametrize("body, out", [
    ("math.add(%x, [0.0, 0.0]:float32(2, 1))", "Tensor[(2, 3), float32]"),  # grows the shape
    ("math.mul(%x, [1.0, 1.0, 1.0]:float32(3,))", "Tensor[(3,), float32]"),  # x may be (1,)
    ("math.mul(%x, [1.0, 2.0, 1.0]:float32(3,))", "Tensor[(3,), float32]"),  # not all ones
    ("math.sub([0.0]:float32(), %x)", "Tensor[(3,), float32]"),  # 0 - x is -x
])
def test_neutral_constants_that_must_stay(body, out):
    shape = "(?,)" if "1.0, 1.0, 1.0" in body else "(3,)"
    unchanged(f"""
def @main(%x: Tensor[{shape}, float32]) -> {out} {{
  {body}
}}""")


def test_casts():
    src = """
def @main(%x: Tensor[(4,), float16], %i: Tensor[(4,), int8]) -> (Tensor[(4,), float16], Tensor[(4,), float32], Tensor[(4,), float16]) {
  %0 = math.cast(%x, to="float32");
  %1 = math.cast(%0, to="float16");
  %2 = math.cast(%i, to="int32");
  %3 = math.cast(%2, to="float32");
  %4 = math.cast(%1, to="float16");
  (%4, %3, math.cast(%0, to="float16"))
}"""
    after = assert_golden(SIMPLIFY, src, """
def @main(%x: Tensor[(4,), float16], %i: Tensor[(4,), int8]) -> (Tensor[(4,), float16], Tensor[(4,), float32], Tensor[(4,), float16]) {
  (%x, math.cast(%i, to="float32"), %x)
}""")
    assert after
    # narrowing first is not exact: float32 -> float16 -> float32 rounds
    unchanged("""
def @main(%x: Tensor[(4,), float32]) -> Tensor[(4,), float32] {
  %0 = math.cast(%x, to="float16");
  math.cast(%0, to="float32")
}""")
    assert exact_cast("bool", "float16") and exact_cast("bfloat16", "float32")
    assert not exact_cast("int64", "float64") and not exact_cast("float32", "bfloat16")


def test_identity_like_data_movement():
    src = """
def @main(%x: Tensor[(N, 3, 4), float32]) -> Tensor[(N, 3, 4), float32] {
  %0 = tensor.expand(%x, [3, 1]:int64(2,));
  %1 = tensor.slice(%0, [0, 0]:int64(2,), [9223372036854775807, 4]:int64(2,), [0, -1]:int64(2,));
  %2 = tensor.slice(%1, [-3]:int64(1,), [3]:int64(1,), [1]:int64(1,), [1]:int64(1,));
  %3 = tensor.tile(%2, [1, 1, 1]:int64(3,));
  %4 = tensor.pad(%3, [0, 0, 0, 0, 0, 0]:int64(6,));
  %5 = tensor.concat(%4, axis=1);
  %6 = math.clip(%5);
  math.sum(%6)
}"""
    assert_golden(SIMPLIFY, src, """
def @main(%x: Tensor[(N, 3, 4), float32]) -> Tensor[(N, 3, 4), float32] {
  %x
}""")
    same_outputs(src, {"x": np.random.rand(2, 3, 4).astype(np.float32)})


@pytest.mark.parametrize("body, out", [
    ("tensor.expand(%x, [2, 4]:int64(2,))", "Tensor[(2, 4), float32]"),
    ("tensor.slice(%x, [0]:int64(1,), [3]:int64(1,))", "Tensor[(?, 4), float32]"),  # N may exceed 3
    ("tensor.slice(%x, [1]:int64(1,), [4]:int64(1,), [1]:int64(1,))", "Tensor[(N, 3), float32]"),
    ("tensor.slice(%x, [-1]:int64(1,), [-9223372036854775807]:int64(1,), [1]:int64(1,), [-1]:int64(1,))",
     "Tensor[(N, 4), float32]"),  # reversed
    ("tensor.transpose(%x, perm=(1, 0))", "Tensor[(4, N), float32]"),
    ("tensor.reshape(%x, [4, -1]:int64(2,))", "Tensor[(4, ?), float32]"),
])
def test_data_movement_that_must_stay(body, out):
    unchanged(f"""
def @main(%x: Tensor[(N, 4), float32]) -> {out} {{
  {body}
}}""")


def test_unknown_rank_is_left_alone():
    unchanged("""
def @main(%x: Tensor[*, float32]) -> Tensor[*, float32] {
  %0 = tensor.transpose(%x);
  %1 = math.mul(%0, [1.0]:float32(1,));
  tensor.transpose(%1)
}""")


def _random_chain(rng, x, steps: int):
    """A chain of layout ops and neutral arithmetic over x of shape (N, 7, 1)."""
    one, zero = Constant(np.ones((1,), np.float32)), Constant(np.float32(0))
    e = x
    for _ in range(steps):
        k = int(rng.integers(0, 6))
        rank = e.type.ndim
        if k == 0:
            e = op("tensor.transpose")(e, perm=tuple(int(p) for p in rng.permutation(rank)))
        elif k == 1:
            e = op("tensor.reshape")(e, Constant(np.array([0] * (rank - 1) + [-1], np.int64)))
        elif k == 2:
            e = op("math.mul")(e, one) if rng.random() < 0.5 else op("math.mul")(one, e)
        elif k == 3:
            e = op("math.add")(zero, e)
        elif k == 4 and rank < 5:
            e = op("tensor.unsqueeze")(e, Constant(np.array([int(rng.integers(0, rank + 1))], np.int64)))
        else:
            e = op("math.cast")(op("math.cast")(e, to="float64"), to="float32")
    return e


@pytest.mark.parametrize("seed", range(8))
def test_random_chains_differential(seed):
    rng = np.random.default_rng(seed)
    x = Var("x", TensorType((SizeVar("N"), 7, 1), "float32"))
    before = IRModule({"main": Function((x,), _random_chain(rng, x, 10))})
    after = run_pass(SIMPLIFY, before)
    feeds = {"x": rng.standard_normal((int(rng.integers(1, 4)), 7, 1)).astype(np.float32)}
    want, got = kiln.evaluate(before, feeds)[0], kiln.evaluate(after, feeds)[0]
    assert want.shape == got.shape
    np.testing.assert_array_equal(got, want)
    assert len(kiln.ir.post_order(after.main)) <= len(kiln.ir.post_order(before.main))


def test_ten_thousand_node_chain():
    x = Var("x", TensorType((2, 3), "float32"))
    e = x
    for _ in range(10_000):
        e = op("tensor.transpose")(op("math.mul")(e, Constant(np.ones((1,), np.float32))), perm=(1, 0))
    after = run_pass(SIMPLIFY, IRModule({"main": Function((x,), e)}))
    assert after.main.body is x
