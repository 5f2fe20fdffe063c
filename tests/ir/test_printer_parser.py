"""Text form: printing, parsing back to a structurally equal module, and parse errors."""

from __future__ import annotations

import math
import random
import warnings

import ml_dtypes
import numpy as np
import pytest

import kiln
from kiln.errors import KilnError, ParseError
from kiln.ir import (
    ANY,
    Call,
    Constant,
    Function,
    GlobalVar,
    If,
    IRModule,
    Let,
    OptionalType,
    SeqType,
    SizeVar,
    TensorType,
    Tuple,
    TupleGetItem,
    TupleType,
    Var,
    absent,
    check_well_formed,
    free_vars,
    parse,
    parse_expr,
    structural_equal,
    text,
    text_with_params,
)
from kiln.ir.attrs import value_equal
from kiln.ir.parser import _Parser
from kiln.ir.printer import _Printer
from kiln.op.registry import REGISTRY

N = SizeVar("N")
F32 = "float32"


def op(name):
    return REGISTRY[name]


def round_trip(m):
    s, params = text_with_params(m)
    back = parse(s, params) if isinstance(m, IRModule) else parse_expr(s, params, tuple(free_vars(m)))
    assert structural_equal(back, m), s
    assert text_with_params(back)[0] == s  # printing is stable
    return s


def test_brief_example():
    x, w = Var("x", TensorType((N, 3), F32)), Var("w", TensorType((4, 3), F32))
    wt = Constant(np.ones((3, 40), np.float32))
    body = Tuple((op("nn.relu")(op("linalg.mat_mul")(x, wt)),))
    m = IRModule({"main": Function((x, w), body)}, ("y",))
    s = round_trip(m)
    assert s == (
        '#[output_names=("y",)]\n\n'
        "def @main(%x: Tensor[(N, 3), float32], %w: Tensor[(4, 3), float32]) -> (Tensor[(N, 40), float32],) {\n"
        "  %0 = linalg.mat_mul(%x, meta[0]);\n"
        "  %1 = nn.relu(%0);\n"
        "  (%1,)\n"
        "}\n")


def every_kind_module():
    """One module holding every node kind, odd names, symbolic/unknown dims and shared nodes."""
    add, mul, relu, cast = op("math.add"), op("math.mul"), op("nn.relu"), op("math.cast")
    x = Var("x.1", TensorType((N, ANY), F32))
    y = Var("0", TensorType(None, F32))
    s = Var("s", SeqType(TensorType((2,), "int64")))
    o = Var("", OptionalType(TensorType((), "bool")))
    c = Var("c", TensorType((), "bool"))
    half = Constant(np.float32(0.5))  # shared small constant
    big = Constant(np.arange(20, dtype=np.float32))
    a = add(x, half)
    b = relu(a)
    v = Var("x.1", a.type)  # same name as a param: printed under a fresh name
    let = Let(v, mul(a, half), add(v, b))
    inner = Var("t", TensorType((), F32))
    lam = Function((inner,), add(inner, Constant(np.float32(2))))
    braced_let = Let(inner2 := Var("u", TensorType((), F32)), Constant(np.float32(-0.0)), Call(lam, (inner2,)))
    tup = Tuple((b, cast(b, to="float16"), Tuple((b,))))
    branch = If(c, add(b, Constant(np.full((20,), np.nan, np.float32))), relu(big))
    g = Function((Var("p", TensorType((3,), "int8")),), Tuple(()), {"Primitive": 1, "Name": "a \"q\"\n"})
    call_g = Call(GlobalVar("helper", g.type), (Constant(np.array([1, -2, 127], np.int8)),))
    strs = Constant(np.array(["a", "b\"c"], dtype=object))
    body = Tuple((let, TupleGetItem(tup, 1), TupleGetItem(TupleGetItem(tup, 2), 0), branch, braced_let, call_g,
                  strs, absent(), s, o, y, Constant(np.zeros((0, 3), np.int64))))
    main = Function((x, y, s, o, c), body)
    return IRModule({"main": main, "helper": g}, ("a", "b"))


def test_round_trip_every_node_kind():
    s = round_trip(every_kind_module())
    for piece in ('%"x.1"', '%"0"', '%""', "%\"x.1_1\"", "let %\"x.1_1\"", "if (%c)", "fn (%t: Tensor[(), float32])",
                  "Primitive=1", "@helper(", "meta[", "Seq[Tensor[(2,), int64]]", "Tensor[*, float32]",
                  "(N, ?)", "-0.0:float32", "[]:int64(0, 3)"):
        assert piece in s, piece


def test_shared_nodes_print_once():
    relu = op("nn.relu")
    x = Var("x", TensorType((2,), F32))
    r = relu(x)
    m = IRModule({"main": Function((x,), op("math.add")(r, r))})
    s = round_trip(m)
    assert s.count("nn.relu") == 1
    absent_shared = absent()
    clip = Tuple((absent_shared, absent_shared))
    round_trip(IRModule({"main": Function((x,), clip)}))


def test_node_used_in_both_branches_and_inside_function():
    add, relu = op("math.add"), op("nn.relu")
    x, c = Var("x", TensorType((2,), F32)), Var("c", TensorType((), "bool"))
    shared = relu(x)
    only_then = add(shared, x)
    p = Var("p", TensorType((2,), F32))
    fn = Function((p,), add(add(p, shared), only_then))
    body = If(c, Call(fn, (only_then,)), shared)
    round_trip(IRModule({"main": Function((x, c), body)}))
    round_trip(fn)  # a lone function with free vars is printed too
    round_trip(Tuple((only_then, shared)))


def test_lone_expressions_round_trip():
    x, v, c = Var("x", TensorType((2,), F32)), Var("v", TensorType((2,), F32)), Var("c", TensorType((), "bool"))
    relu = op("nn.relu")
    for e in (Let(v, relu(x), relu(v)), If(c, relu(x), x), x, Constant(np.zeros(100)), absent(), relu(x)):
        round_trip(e)


def test_control_loop_with_function_argument():
    i, cond, acc = (Var("i", TensorType((), "int64")), Var("cond", TensorType((), "bool")),
                    Var("acc", TensorType((2,), F32)))
    body = Function((i, cond, acc), Tuple((cond, op("math.add")(acc, acc))))
    n, c0, a0 = Var("n", TensorType((), "int64")), Var("c0", TensorType((), "bool")), Var("a0", acc.type)
    loop = Call(op("control.loop"), (body, n, c0, a0))
    m = IRModule({"main": Function((n, c0, a0), loop)})
    s = round_trip(m)
    assert "fn (%i: Tensor[(), int64]" in s
    out = kiln.evaluate(parse(s), {"n": np.array(3), "c0": np.array(True), "a0": np.ones(2, np.float32)})
    np.testing.assert_array_equal(out[0], [8, 8])


def test_attrs_print_only_non_defaults():
    x = Var("x", TensorType((1, 1, 5, 5), F32))
    w = Constant(np.ones((1, 1, 3, 3), np.float32))
    conv = op("nn.conv")(x, w, strides=(2, 2), pads=(1, 1, 1, 1))
    s = round_trip(IRModule({"main": Function((x,), conv)}))
    assert "strides=(2, 2), pads=(1, 1, 1, 1)" in s or "pads=(1, 1, 1, 1), strides=(2, 2)" in s
    assert "group=" not in s


@pytest.mark.parametrize("value", [
    0, -7, 2**70, True, False, None, 1.5, -0.0, 1e-300, math.inf, -math.inf, math.nan, "", "q\"\\\n\t\u00e9\u4e2d",
    (), (1,), (1, (2.5, "x"), None), np.float32(0.1), np.int64(-3), np.bool_(True),
    np.array(3.0), np.array([1, 2, 3], np.uint64), np.array([[1.5, -0.0]], ml_dtypes.bfloat16),
    np.arange(100, dtype=np.int32), np.array(["s"], dtype=object), np.array([2**64 - 1], np.uint64),
    TensorType((N, 3), "int4"), TupleType((TensorType(None, "bool"),)), SeqType(TensorType((), "string")),
])
def test_attribute_values_round_trip(value):
    params: list = []
    s = _Printer(params).value(value)
    p = _Parser(s, params)
    back = p.value()
    p.expect("EOF")
    assert value_equal(back, value) or (isinstance(value, float) and math.isnan(value) and math.isnan(back)), s
    assert type(back) is type(value), s


def test_parse_hand_written_text():
    src = """
    // a comment
    def @main(%x: Tensor[(batch, 3), float32]) -> Tensor[(batch, 3), float32] {
      %0 = nn.relu(%x);
      let %y: Tensor[(batch, 3), float32] = math.add(%0, [1.0, 2.0, 3.0]:float32(3,));
      %1 = math.cast(%y, to="float16");
      math.cast(%1, to="float32")
    }
    """
    m = parse(src)
    assert isinstance(m.main.body, Let)
    out = kiln.evaluate(m, {"x": -np.ones((2, 3), np.float32)})
    np.testing.assert_array_equal(out[0], [[1, 2, 3], [1, 2, 3]])


@pytest.mark.parametrize("src, where, what", [
    ("def @main() -> () {\n  %0 = nn.nope(1:int64);\n  ()\n}", "line 2, column 8", "unknown operator 'nn.nope'"),
    ("def @main() -> () {\n  %3\n}", "line 2, column 3", "%3 is not defined"),
    ("def @main() -> () {\n  %0 = ()\n  %0\n}", "line 3, column 3", "expected ';'"),
    ("def @main(%x: Tensor[(2,), float33]) -> () {\n  ()\n}", "line 1, column 28", "unknown dtype"),
    ("def @main() -> () {\n  meta[0]\n}", "line 2, column 8", "params table"),
    ("def @main() -> () {\n  @f(1)\n}", "line 2, column 3", "unknown global function @f"),
    ("def @main() -> () {\n  ()", "line 2, column 5", "expected '}'"),
    ("def @main(%x: Tensor[(2,), float32]) -> () {\n  nn.relu(%x, alpha=1.0)\n}", "line 2, column 3",
     "takes no attributes"),
    ("def @main(%x: Tensor[(2,), float32]) -> () {\n  math.add(%x, 1:int64)\n}", "line 2, column 3",
     "math.add"),
    ("def @main() -> () {\n  $\n}", "line 2, column 3", "unexpected character '$'"),
])
def test_parse_errors_name_line_and_column(src, where, what):
    with pytest.raises(ParseError) as info:
        parse(src)
    assert where in str(info.value) and what in str(info.value), str(info.value)


def test_text_without_params_still_prints():
    m = IRModule({"main": Function((), Constant(np.zeros(100, np.float32)))})
    assert "meta[0]" in text(m) and repr(m) == text(m)


def _conformance_cases():
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return collect_testcases(None)


def test_round_trip_onnx_node_conformance_models():
    """Every model of the ONNX node suite that Kiln imports is well formed, prints and parses back equal."""
    done = 0
    for case in _conformance_cases():
        try:
            m = kiln.from_onnx(case.model)
        except KilnError:
            continue
        s, params = text_with_params(m)
        assert structural_equal(parse(s, params), m), case.name
        check_well_formed(m)
        done += 1
    assert done > 0


def random_scoped_graph(rng: random.Random, pool: list, cond: Var, depth: int = 0):
    """Random nodes over `pool` with Ifs, Lets and Functions, sharing nodes across their scopes.
    Returns (last node, every node made); nodes made in If branches are reused outside them."""
    add, relu = op("math.add"), op("nn.relu")
    local = list(pool)
    for _ in range(rng.randint(1, 4 if depth else 25)):
        k, a, b = rng.random(), rng.choice(local), rng.choice(local)
        if k < 0.4 or depth >= 3:
            local.append(add(a, b) if k < 0.25 else relu(a))
        elif k < 0.55:
            (then, made_t), (other, made_e) = (random_scoped_graph(rng, local, cond, depth + 1) for _ in "te")
            local += [If(cond, then, other), *rng.sample(made_t + made_e, 2)]
        elif k < 0.7:
            v = Var("v", a.type)
            local.append(Let(v, a, random_scoped_graph(rng, local + [v], cond, depth + 1)[0]))
        elif k < 0.85:
            p = Var("p", a.type)
            f = Function((p,), random_scoped_graph(rng, local + [p], cond, depth + 1)[0])
            local += [Call(f, (a,)), Call(f, (b,))][:rng.randint(1, 2)]
        else:
            t = Tuple((a, b))
            local += [TupleGetItem(t, 1), TupleGetItem(t, 0)][:rng.randint(1, 2)]
    return local[-1], local


@pytest.mark.parametrize("seed", range(60))
def test_random_scoped_graphs_round_trip(seed):
    rng = random.Random(seed)
    x, c = Var("x", TensorType((2,), F32)), Var("c", TensorType((), "bool"))
    last, made = random_scoped_graph(rng, [x], c)
    m = IRModule({"main": Function((x, c), Tuple((last, rng.choice(made))))})
    s = round_trip(m)
    feeds = {"x": np.array([1, -2], np.float32), "c": np.array(seed % 2 == 0)}
    for want, got in zip(kiln.evaluate(m, feeds), kiln.evaluate(parse(s), feeds)):
        np.testing.assert_array_equal(got, want)
