"""Structural equality and hashing: alpha-equivalence, sharing, constants, attrs, modules."""

from __future__ import annotations

import random

import numpy as np
import pytest

from kiln.ir import (
    Call,
    Constant,
    Function,
    If,
    IRModule,
    Let,
    TensorType,
    Tuple,
    TupleGetItem,
    Var,
    structural_equal,
    structural_hash,
)
from kiln.op.registry import REGISTRY

add, mul, relu, cast = (REGISTRY[n] for n in ("math.add", "math.mul", "nn.relu", "math.cast"))
T = TensorType((2, 3), "float32")


def assert_equal(a, b):
    assert structural_equal(a, b) and structural_equal(b, a)
    assert structural_hash(a) == structural_hash(b)


def assert_unequal(a, b):
    assert not structural_equal(a, b) and not structural_equal(b, a)


def build(name="x", k=1.0, to="float16", shape=(2, 3)):
    x = Var(name, TensorType(shape, "float32"))
    y = Var("y_" + name, TensorType(shape, "float32"))
    v = Var("v", TensorType(shape, "float32"))
    body = Let(v, add(x, Constant(np.float32(k))), Tuple((cast(relu(v), to=to), mul(v, y))))
    return Function((x, y), body)


def test_alpha_renamed_functions_are_equal():
    assert_equal(build("a"), build("b"))


@pytest.mark.parametrize("change", [{"k": 2.0}, {"to": "float64"}, {"shape": (3, 2)}])
def test_different_constants_attrs_and_shapes_are_unequal(change):
    assert_unequal(build(), build(**change))


def test_bound_vars_match_by_position():
    x, y = Var("x", T), Var("y", T)
    assert_unequal(Function((x, y), add(x, y)), Function((x, y), add(y, x)))
    p, q = Var("p", T), Var("q", T)
    assert_equal(Function((x, y), add(y, x)), Function((p, q), add(q, p)))


def test_free_vars_match_by_identity():
    x, y = Var("x", T), Var("x", T)
    assert_equal(relu(x), relu(x))
    assert_unequal(relu(x), relu(y))
    assert_unequal(Function((x,), relu(x)), relu(x))


def test_sharing_must_agree():
    x = Var("x", T)
    r = relu(x)
    shared, copied = add(r, r), add(relu(x), relu(x))
    assert_unequal(shared, copied)
    r2 = relu(x)
    assert_equal(shared, add(r2, r2))


def test_constants_compare_by_value_nan_equal():
    a = Constant(np.array([np.nan, 1.0], np.float32))
    assert_equal(a, Constant(np.array([np.nan, 1.0], np.float32)))
    assert_equal(Constant(np.array([-0.0])), Constant(np.array([0.0])))
    assert_unequal(a, Constant(np.array([np.nan, 1.0], np.float64)))
    assert_unequal(a, Constant(np.array([[np.nan, 1.0]], np.float32)))
    import ml_dtypes
    b = np.array([np.nan, 2], ml_dtypes.bfloat16)
    assert_equal(Constant(b), Constant(b.copy()))
    assert_equal(Constant(np.array(["a"], dtype=object)), Constant(np.array(["a"], dtype=object)))


def test_if_tuple_getitem_and_function_attrs():
    c, x = Var("c", TensorType((), "bool")), Var("x", T)
    t = Tuple((x, relu(x)))
    a = Function((c, x), If(c, TupleGetItem(t, 0), TupleGetItem(t, 1)), {"Primitive": 1})
    c2, x2 = Var("c", TensorType((), "bool")), Var("x", T)
    t2 = Tuple((x2, relu(x2)))
    b = Function((c2, x2), If(c2, TupleGetItem(t2, 0), TupleGetItem(t2, 1)), {"Primitive": 1})
    assert_equal(a, b)
    assert_unequal(a, Function(b.params, b.body))
    assert_unequal(a, Function(b.params, If(c2, TupleGetItem(t2, 1), TupleGetItem(t2, 0)), {"Primitive": 1}))


def test_call_of_function_value():
    x = Var("x", T)
    p = Var("p", T)
    f = Function((p,), relu(p))
    q = Var("q", T)
    assert_equal(Function((x,), Call(f, (x,))), Function((x,), Call(Function((q,), relu(q)), (x,))))


def test_modules():
    a = IRModule({"main": build("a")}, ("o1", "o2"))
    assert_equal(a, IRModule({"main": build("b")}, ("o1", "o2")))
    assert_unequal(a, IRModule({"main": build("b")}, ("o1", "o3")))
    assert_unequal(a, IRModule({"main": build("b"), "f": build("c")}, ("o1", "o2")))
    assert not structural_equal(a, a.main)


def random_graph(seed: int, tweak: bool = False):
    """A random DAG with sharing; `tweak` changes one constant."""
    rng = random.Random(seed)
    x = Var("x", T)
    nodes = [x]
    for i in range(60):
        kind = rng.random()
        a, b = rng.choice(nodes), rng.choice(nodes)
        if kind < 0.4:
            nodes.append(add(a, b))
        elif kind < 0.7:
            nodes.append(relu(a))
        else:
            val = np.float32(i + (0.5 if tweak and i == 59 else 0))
            nodes.append(mul(a, Constant(val)))
    return Function((x,), Tuple(tuple(nodes[-5:])))


@pytest.mark.parametrize("seed", range(20))
def test_random_graphs(seed):
    assert_equal(random_graph(seed), random_graph(seed))
    g = random_graph(seed)
    if any(isinstance(e, Constant) and e.data == 59 for e in _all(g)):
        assert_unequal(g, random_graph(seed, tweak=True))


def _all(e):
    from kiln.ir import post_order

    return post_order(e)
