"""The reference interpreter: deep graphs, lazy If, closures, lets, global functions."""

from __future__ import annotations

import numpy as np

from kiln.ir import Call, Constant, Function, GlobalVar, If, IRModule, Let, TensorType, Tuple, TupleGetItem, Var
from kiln.op import get_op
from kiln.op.interpreter import evaluate

relu, add = get_op("nn.relu"), get_op("math.add")
T = TensorType((3,), "float32")


def test_ten_thousand_node_chain():
    x = Var("x", T)
    e = x
    for _ in range(10_000):
        e = add(relu(e), Constant(np.ones(3, np.float32)))
    mod = IRModule({"main": Function((x,), e)})
    (out,) = evaluate(mod, {"x": np.zeros(3, np.float32)})
    np.testing.assert_array_equal(out, np.full(3, 10_000, np.float32))


def test_deep_let_chain():
    x = Var("x", T)
    vs = [Var(f"v{i}", T) for i in range(5000)]
    body = vs[-1]
    for i in reversed(range(5000)):
        prev = x if i == 0 else vs[i - 1]
        body = Let(vs[i], add(prev, Constant(np.ones(3, np.float32))), body)
    mod = IRModule({"main": Function((x,), body)})
    (out,) = evaluate(mod, {"x": np.zeros(3, np.float32)})
    np.testing.assert_array_equal(out, np.full(3, 5000, np.float32))


def test_if_evaluates_only_the_taken_branch():
    c = Var("c", TensorType((), "bool"))
    x = Var("x", T)
    # the else branch adds incompatible shapes at run time would fail; it must never run
    bad = add(x, Var("unbound", T))
    e = If(c, relu(x), bad)
    mod = IRModule({"main": Function((c, x), e)})
    (out,) = evaluate(mod, {"c": np.array(True), "x": np.array([-1, 2, -3], np.float32)})
    np.testing.assert_array_equal(out, [0, 2, 0])


def test_function_values_and_globals():
    y = Var("y", T)
    double = Function((y,), add(y, y))
    x = Var("x", T)
    gv = GlobalVar("double", double.type)
    main = Function((x,), Tuple((Call(gv, (x,)), Call(double, (relu(x),)))))
    mod = IRModule({"main": main, "double": double})
    a, b = evaluate(mod, {"x": np.array([-1, 2, 3], np.float32)})
    np.testing.assert_array_equal(a, [-2, 4, 6])
    np.testing.assert_array_equal(b, [0, 4, 6])


def test_tuple_get_item_and_shared_nodes_evaluated_once():
    calls = []
    x = Var("x", T)
    r = relu(x)
    t = Tuple((r, add(r, r)))
    main = Function((x,), TupleGetItem(t, 1))
    orig = relu.reference
    try:
        object.__setattr__(relu, "reference", lambda a, v: calls.append(1) or orig(a, v))
        (out,) = evaluate(IRModule({"main": main}), {"x": np.array([1, -1, 2], np.float32)})
    finally:
        object.__setattr__(relu, "reference", orig)
    np.testing.assert_array_equal(out, [2, 0, 4])
    assert len(calls) == 1
