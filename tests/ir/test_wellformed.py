"""Well-formedness: scoping of Vars, GlobalVars, and stored types."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.errors import WellFormednessError
from kiln.ir import Call, Constant, Function, GlobalVar, IRModule, Let, TensorType, Tuple, Var, check_well_formed, parse
from kiln.op.registry import REGISTRY

add, relu, cast = REGISTRY["math.add"], REGISTRY["nn.relu"], REGISTRY["math.cast"]
T = TensorType((2,), "float32")


def module(*params, body, **more):
    return IRModule({"main": Function(params, body), **more})


def raises(x, *words):
    with pytest.raises(WellFormednessError) as info:
        check_well_formed(x)
    for w in words:
        assert w in str(info.value), str(info.value)


def test_well_formed_module_passes():
    x, v = Var("x", T), Var("v", T)
    f = Function((Var("p", T),), Tuple(()))
    check_well_formed(module(x, body=Let(v, relu(x), Tuple((add(v, x), Call(GlobalVar("f", f.type), (v,))))),
                             f=f))
    check_well_formed(relu(x))  # a lone expression may use free vars


def test_unbound_variable():
    x, y = Var("x", T), Var("y", T)
    raises(module(x, body=add(x, y)), "@main", "%y", "is unbound")


def test_var_used_outside_its_let():
    x, v = Var("x", T), Var("v", T)
    let = Let(v, relu(x), v)
    raises(module(x, body=Tuple((let, relu(v)))), "%v", "outside the scope")
    raises(Tuple((let, relu(v))), "%v", "outside the scope")


def test_var_bound_twice():
    x, v = Var("x", T), Var("v", T)
    raises(module(x, body=Let(v, x, Let(v, x, v))), "%v", "bound twice")
    raises(IRModule({"main": Function((x,), x), "g": Function((x,), x)}), "%x", "bound twice")
    raises(Function((x, x), x), "%x", "bound twice")
    shared = Function((Var("p", T),), Tuple(()))  # one binder reached twice is fine
    check_well_formed(IRModule({"main": Function((x,), Tuple((shared, shared))), "g": shared}))


def test_unknown_global_function():
    x = Var("x", T)
    g = GlobalVar("missing", Function((Var("p", T),), relu(x)).type)
    raises(module(x, body=Call(g, (x,))), "@missing", "no function")


def test_global_var_type_mismatch():
    x = Var("x", T)
    f = Function((Var("p", T),), Tuple(()))
    g = GlobalVar("f", Function((Var("p", TensorType((3,), "int8")),), Tuple(())).type)
    raises(module(x, body=Call(g, (Constant(np.zeros(3, np.int8)),)), f=f), "@f", "has type")


def test_stale_call_type():
    x = Var("x", T)
    c = cast(x, to="float16", name="Cast_7")
    object.__setattr__(c, "type", T)  # as a buggy pass that kept an old type would
    raises(module(x, body=c), "math.cast", "Cast_7", "stored type", "float16")


def test_call_type_relation_now_fails():
    x = Var("x", T)
    c = relu(x)
    object.__setattr__(c, "args", (Constant(np.array(["s"], dtype=object)),))
    raises(module(x, body=c), "nn.relu", "type check fails")


def test_let_var_type_disagrees_with_value():
    x, v = Var("x", T), Var("v", TensorType((2,), "int64"))
    raises(module(x, body=Let(v, x, v)), "let %v", "int64")


def test_call_of_function_value_with_wrong_argument():
    x = Var("x", T)
    f = Function((Var("p", TensorType((3,), "float32")),), Tuple(()))
    c = Call(f, (x,))
    raises(module(x, body=c), "argument 0")


def test_parsed_text_is_checked():
    m = parse("def @main(%x: Tensor[(2,), float32]) -> Tensor[(2,), float32] {\n  nn.relu(%x)\n}")
    check_well_formed(m)
