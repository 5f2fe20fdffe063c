"""The pattern language (matching, captures, alternatives, predicates) and the rewrite driver."""

from __future__ import annotations

from collections import Counter

import numpy as np

import kiln
from kiln.ir import Constant, Function, SizeVar, TensorType, Tuple, TupleGetItem, Var
from kiln.op.registry import get_op
from kiln.transform.pattern import (
    Rule,
    apply_rules,
    count_uses,
    is_constant,
    is_op,
    is_tuple,
    is_tuple_get_item,
    is_var,
    omitted,
    optional,
    type_refines,
    wildcard,
)

F32 = "float32"
add, mul, relu, neg = (get_op(n) for n in ("math.add", "math.mul", "nn.relu", "math.neg"))


def var(shape=(2, 3), dtype=F32, name="x"):
    return Var(name, TensorType(shape, dtype))


def m(p, e):
    return p.match(e, {})


def test_op_and_wildcard_capture():
    x = var()
    e = relu(add(x, Constant(np.ones((3,), np.float32))))
    caps = m(is_op("nn.relu")(is_op("math.add")(wildcard().named("a"), is_constant().named("c"))), e)
    assert caps["a"] is x and isinstance(caps["c"], Constant)
    assert m(is_op("nn.relu")(is_op("math.mul")(wildcard(), wildcard())), e) is None
    assert m(is_op("nn.relu", "nn.sigmoid"), e) is not None


def test_commutative_operands_and_backtracking_captures():
    x, y = var(), var(name="y")
    e = add(Constant(np.zeros((3,), np.float32)), x)
    caps = m(is_op("math.add")(is_var().named("v"), is_constant(0.0).named("c")), e)
    assert caps["v"] is x
    # sub is not commutative
    assert m(is_op("math.sub")(is_var(), is_constant()), get_op("math.sub")(Constant(np.float32(1)), x)) is None
    # a failed first ordering leaves no stale capture behind
    caps = m(is_op("math.mul")(wildcard().named("a"), is_var().named("a")), mul(y, y))
    assert caps == {"a": y}


def test_same_name_means_same_node():
    x, y = var(), var(name="y")
    p = is_op("math.mul")(wildcard().named("a"), wildcard().named("a"))
    assert m(p, mul(x, x)) is not None
    assert m(p, mul(x, y)) is None
    shared = neg(x)
    assert m(p, mul(shared, shared)) is not None
    assert m(p, mul(neg(x), neg(x))) is None  # equal structure is not the same value


def test_alternatives_and_predicates():
    x = var()
    p = (is_op("nn.relu")(wildcard()) | is_op("math.neg")(wildcard().named("n"))).named("root")
    assert "n" in m(p, neg(x)) and m(p, relu(x)) is not None
    assert m(p, mul(x, x)) is None
    t = get_op("tensor.transpose")(x, perm=(1, 0))
    assert m(is_op("tensor.transpose").has_attr(perm=(1, 0)), t) is not None
    assert m(is_op("tensor.transpose").has_attr(perm=(0, 1)), t) is None
    assert m(wildcard().has_dtype("float32").has_rank(2), x) is not None
    assert m(wildcard().has_dtype("float64"), x) is None
    assert m(wildcard().has_type(lambda t: t.shape == (2, 3)), x) is not None


def test_constants_by_value():
    one = Constant(np.ones((2, 1), np.float32))
    assert m(is_constant(1.0), one) is not None
    assert m(is_constant(2.0), one) is None
    assert m(is_constant(0.70710678), Constant(np.float16(0.7071))) is not None  # float16 ulps
    assert m(is_constant(0.70710678), Constant(np.float32(0.7071))) is None
    assert m(is_constant(1.0), Constant(np.array(["1"], dtype=object))) is None


def test_optional_and_omitted_inputs():
    x = var((1, 3, 5, 5))
    w = Constant(np.ones((4, 3, 1, 1), np.float32))
    conv2 = get_op("nn.conv")(x, w)
    conv3 = get_op("nn.conv")(x, w, Constant(np.zeros((4,), np.float32)))
    p_opt = is_op("nn.conv")(wildcard(), wildcard(), optional(is_constant().named("b")))
    assert m(p_opt, conv2) == {} and "b" in m(p_opt, conv3)
    p_none = is_op("nn.conv")(wildcard(), wildcard(), omitted())
    assert m(p_none, conv2) is not None and m(p_none, conv3) is None
    assert m(is_op("nn.conv")(wildcard()), conv2) is None  # more arguments than the pattern has


def test_tuple_patterns():
    x = var()
    t = Tuple((x, neg(x)))
    assert m(is_tuple_get_item(is_tuple(), 1), TupleGetItem(t, 1)) is not None
    assert m(is_tuple_get_item(is_tuple(), 0), TupleGetItem(t, 1)) is None


NEG_NEG = [Rule("neg-neg", is_op("math.neg")(is_op("math.neg")(wildcard().named("x"))), lambda mt: mt["x"])]


def test_driver_reaches_fixpoint_and_counts():
    x = var()
    e = x
    for _ in range(5):
        e = neg(e)
    stats = Counter()
    out = apply_rules(Function((x,), e), NEG_NEG, stats)
    assert kiln.ir.structural_equal(out, Function((x,), neg(x)))
    assert stats["neg-neg"] == 2


def test_driver_is_iterative_on_deep_chains():
    x = var((4,))
    e = x
    for _ in range(10_000):
        e = neg(e)
    out = apply_rules(Function((x,), e), NEG_NEG)
    assert out.body is x  # an even number of negations cancels entirely


def test_driver_rejects_type_changes_and_failed_builds():
    x = var((2, 3))
    bad = Rule("to-bigger", is_op("nn.relu")(wildcard().named("x")),
               lambda mt: add(mt["x"], Constant(np.zeros((4, 2, 3), np.float32))))
    ill = Rule("ill-typed", is_op("nn.relu")(wildcard().named("x")),
               lambda mt: add(mt["x"], Constant(np.zeros((5,), np.float32))))
    fn = Function((x,), relu(x))
    stats = Counter()
    assert apply_rules(fn, [bad, ill], stats) is fn
    assert stats == {"rejected:to-bigger": 1}


def test_use_counts_and_type_refinement():
    x = var()
    n = neg(x)
    fn = Function((x,), add(n, n))
    uses = count_uses(fn)
    assert uses[id(n)] == 2 and uses[id(x)] == 2  # the parameter list and neg
    seen = []
    rule = Rule("probe", is_op("math.neg"), lambda mt: seen.append(mt.uses(mt.root)))
    apply_rules(fn, [rule])
    assert seen == [2]
    N, any_ = SizeVar("N"), kiln.ir.ANY
    assert type_refines(TensorType((any_, 3), F32), TensorType((N, 3), F32))
    assert not type_refines(TensorType((N, 3), F32), TensorType((2, 3), F32))
    assert type_refines(TensorType(None, F32), TensorType((2,), F32))
    assert not type_refines(TensorType((2,), F32), TensorType((2,), "float64"))
