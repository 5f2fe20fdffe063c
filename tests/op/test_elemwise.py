"""The elementwise family: references vs numpy / onnxruntime, type relations, old-opset converters."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import kiln
from kiln.errors import ImportError_, TypeInferenceError
from kiln.ir.expr import Var, absent
from kiln.ir.types import ANY, SizeVar, TensorType
from kiln.op import elemwise as ew
from kiln.op.interpreter import run_op
from kiln.op.registry import OpDef, get_op
from tests.helpers import model

ort = pytest.importorskip("onnxruntime")
ORT_UNSUPPORTED = (ort.capi.onnxruntime_pybind11_state.NotImplemented, ort.capi.onnxruntime_pybind11_state.Fail)
N = SizeVar("N")
SHAPES = [((3, 1, 7), (1, 5, 1)), ((1,), (13,)), ((), (2, 3)), ((2, 3, 5), (5,)), ((11,), (11,))]


def run(name: str, *args: np.ndarray, **attrs) -> np.ndarray:
    op = get_op(name)
    return run_op(op, op.attrs_type(**attrs) if op.attrs_type else None, list(args))


def infer(name: str, *types: TensorType | None, **attrs):
    """Output type of `name` on inputs of these types (None: an omitted optional input)."""
    args = tuple(absent() if t is None else Var(f"x{i}", t) for i, t in enumerate(types))
    return get_op(name)(*args, **attrs).type


def onnx_vs_ort(op_type: str, feeds: dict[str, np.ndarray], out_type: int, rtol=1e-5, atol=1e-6,
                opset: int = 21, **attrs) -> None:
    """One-node model run by Kiln (import + interpreter) and by onnxruntime; results must agree."""
    ins = [(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in feeds.items()]
    node = helper.make_node(op_type, list(feeds), ["y"], **attrs)
    out_shape = np.broadcast_shapes(*(v.shape for v in feeds.values()))
    m = model([node], ins, [("y", out_type, out_shape)], opset=opset)
    try:
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    except ORT_UNSUPPORTED as e:  # onnxruntime lacks this dtype/opset variant: nothing to compare with
        pytest.skip(f"onnxruntime: {str(e)[:120]}")
    want = sess.run(None, feeds)[0]
    got = kiln.evaluate(kiln.from_onnx(m), feeds)[0]
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)


def rand(rng, shape, dtype, lo=-3.0, hi=3.0) -> np.ndarray:
    if np.dtype(dtype).kind in "iu":
        lo = max(lo, np.iinfo(dtype).min)
        return rng.integers(int(lo), int(hi) + 1, size=shape).astype(dtype)
    return rng.uniform(lo, hi, size=shape).astype(dtype)


# ---------------------------------------------------------------------------------------------
# against onnxruntime

UNARY_DOMAINS = {"Acos": (-1, 1), "Asin": (-1, 1), "Atanh": (-0.99, 0.99), "Acosh": (1, 4), "Log": (0.1, 4),
                 "Sqrt": (0, 4), "Reciprocal": (0.5, 3)}
UNARY = ["Abs", "Neg", "Sign", "Reciprocal", "Sqrt", "Exp", "Log", "Erf", "Ceil", "Floor", "Round", "Sin", "Cos",
         "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Tanh", "Asinh", "Acosh", "Atanh", "Relu", "Sigmoid",
         "HardSwish", "Softplus", "Softsign", "Mish"]


@pytest.mark.parametrize("op_type", UNARY)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unary_float_vs_ort(op_type, dtype):
    rng = np.random.default_rng(0)
    x = rand(rng, (2, 1, 7), dtype, *UNARY_DOMAINS.get(op_type, (-4, 4)))
    onnx_vs_ort(op_type, {"x": x}, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))


ACTIVATIONS = [("LeakyRelu", {"alpha": 0.3}), ("Elu", {"alpha": 0.7}), ("Selu", {}), ("Celu", {"alpha": 2.0}),
               ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}), ("ThresholdedRelu", {"alpha": 0.5}),
               ("Shrink", {"lambd": 0.8, "bias": 0.3}), ("Gelu", {}), ("Gelu", {"approximate": "tanh"})]


@pytest.mark.parametrize("op_type,attrs", ACTIVATIONS)
def test_activations_vs_ort(op_type, attrs):
    x = rand(np.random.default_rng(1), (3, 5, 1), np.float32)
    onnx_vs_ort(op_type, {"x": x}, TensorProto.FLOAT, opset=21 if op_type != "Gelu" else 20, **attrs)


@pytest.mark.parametrize("op_type", ["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.uint8])
@pytest.mark.parametrize("shapes", SHAPES)
def test_arithmetic_vs_ort(op_type, dtype, shapes):
    if op_type == "Pow" and dtype == np.uint8:
        pytest.skip("onnxruntime has no uint8 Pow")
    rng = np.random.default_rng(2)
    a = rand(rng, shapes[0], dtype, -9, 9)
    b = rand(rng, shapes[1], dtype, 1 if op_type == "Div" else 0, 4 if op_type == "Pow" else 9)
    if op_type == "Div" and np.dtype(dtype).kind == "i":
        b = np.where(rng.random(b.shape) < 0.5, -b, b).astype(dtype)
    onnx_vs_ort(op_type, {"a": a, "b": b}, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))


@pytest.mark.parametrize("op_type", ["Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_comparison_vs_ort(op_type, dtype):
    rng = np.random.default_rng(3)
    a, b = rand(rng, (3, 1, 7), dtype, -2, 2), rand(rng, (5, 1), dtype, -2, 2)
    onnx_vs_ort(op_type, {"a": a, "b": b}, TensorProto.BOOL)


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("dtype", [np.int32, np.float32])
def test_mod_vs_ort(fmod, dtype):
    if fmod == 0 and dtype == np.float32:
        pytest.skip("onnxruntime requires fmod=1 for floats")
    rng = np.random.default_rng(4)
    a, b = rand(rng, (4, 7), dtype, -20, 20), rand(rng, (7,), dtype, 1, 6)
    b = np.where(np.arange(7) % 2 == 0, -b, b).astype(dtype)
    onnx_vs_ort("Mod", {"a": a, "b": b}, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), fmod=fmod)


def test_prelu_and_where_vs_ort():
    rng = np.random.default_rng(5)
    x, slope = rand(rng, (2, 3, 5), np.float32), rand(rng, (3, 1), np.float32)
    onnx_vs_ort("PRelu", {"x": x, "slope": slope}, TensorProto.FLOAT)
    c = rng.random((1, 5)) < 0.5
    onnx_vs_ort("Where", {"c": c, "a": x, "b": rand(rng, (3, 1), np.float32)}, TensorProto.FLOAT)


# ---------------------------------------------------------------------------------------------
# semantics against numpy


def test_int_div_truncates_and_mod_signs():
    a = np.array([7, -7, 7, -7, 0, -128], np.int8)
    b = np.array([2, 2, -2, -2, 3, 3], np.int8)
    np.testing.assert_array_equal(run("math.div", a, b), [3, -3, -3, 3, 0, -42])
    np.testing.assert_array_equal(run("math.mod", a, b), [1, 1, -1, -1, 0, 1])
    np.testing.assert_array_equal(run("math.mod", a, b, fmod=1), [1, -1, 1, -1, 0, -2])
    assert run("math.div", a, b).dtype == np.int8


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(-2**31, 2**31 - 1), st.integers(-50, 50).filter(bool)), min_size=1))
def test_int_div_and_fmod_reassemble(pairs):
    a = np.array([p[0] for p in pairs], np.int64)
    b = np.array([p[1] for p in pairs], np.int64)
    q, r = run("math.div", a, b), run("math.mod", a, b, fmod=1)
    np.testing.assert_array_equal(q * b + r, a)
    assert np.all(np.abs(r) < np.abs(b)) and np.all((r == 0) | (np.sign(r) == np.sign(a)))


def test_float_mod_edge_cases():
    x = np.array([-0.0, 0.0, np.inf, 5.0, 1.0, -1.0], np.float32)
    y = np.array([3.0, -3.0, 2.0, 0.0, -np.inf, np.inf], np.float32)
    got = run("math.mod", x, y)
    np.testing.assert_array_equal(np.signbit(got[:2]), [False, True])
    assert np.isnan(got[2]) and np.isnan(got[3])
    np.testing.assert_array_equal(got[4:], [-np.inf, np.inf])


def test_pow_mixed_dtypes():
    base = np.array([2, 3, -2, 1, -1, 5], np.int32)
    np.testing.assert_array_equal(run("math.pow", base, np.array([3, 2, 3, -4, -3, -1], np.int64)),
                                  [8, 9, -8, 1, -1, 0])
    got = run("math.pow", base[:3], np.array([0.5, 2.0, 3.0], np.float32))
    assert got.dtype == np.int32 and list(got) == [1, 9, -8]
    got = run("math.pow", np.array([4.0, 2.0], np.float16), np.array([-1, 10], np.int64))
    assert got.dtype == np.float16 and list(got) == [0.25, 1024.0]


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.uint64])
def test_bit_shift_edges(dtype):
    bits = np.dtype(dtype).itemsize * 8
    x = np.array([1, 5, 96, 3, 1], dtype)
    y = np.array([1, 2, 1, bits, bits - 1], dtype)
    np.testing.assert_array_equal(run("math.bit_shift", x, y, direction="LEFT"),
                                  np.array([2, 20, 192 % 256 if bits == 8 else 192, 0, 1 << (bits - 1)],
                                           dtype=np.uint64).astype(dtype))
    np.testing.assert_array_equal(run("math.bit_shift", x, y, direction="RIGHT"), np.array([0, 1, 48, 0, 0], dtype))
    if dtype == np.uint64:
        top = np.array([2**64 - 1], dtype)
        assert run("math.bit_shift", top, np.array([1], dtype), direction="RIGHT")[0] == 2**63 - 1
    if np.dtype(dtype).kind == "i":
        neg = np.array([-8, -8, -8, 8], dtype)
        np.testing.assert_array_equal(run("math.bit_shift", neg, np.array([1, bits, -1, -1], dtype),
                                          direction="RIGHT"), [-4, -1, -1, 0])


def test_clip_bounds():
    x = np.array([-5, 0, 5, 9], np.int8)
    np.testing.assert_array_equal(run("math.clip", x, np.int8(-1), np.int8(6)), [-1, 0, 5, 6])
    np.testing.assert_array_equal(run("math.clip", x, None, np.int8(2)), [-5, 0, 2, 2])
    np.testing.assert_array_equal(run("math.clip", x, np.int8(1)), [1, 1, 5, 9])
    np.testing.assert_array_equal(run("math.clip", x), x)
    np.testing.assert_array_equal(run("math.clip", x, np.int8(4), np.int8(2)), [2, 2, 2, 2])
    f = run("math.clip", np.array([np.nan, 3], np.float32), np.float32(0), np.float32(1))
    assert np.isnan(f[0]) and f[1] == 1


def test_variadic_and_logic():
    rng = np.random.default_rng(6)
    xs = [rand(rng, s, np.float32) for s in [(1, 7), (3, 1), (7,)]]
    np.testing.assert_allclose(run("math.sum", *xs), xs[0] + xs[1] + xs[2], rtol=1e-6)
    np.testing.assert_allclose(run("math.mean", *xs), (xs[0] + xs[1] + xs[2]) / 3, rtol=1e-6)
    np.testing.assert_array_equal(run("math.max", *xs), np.maximum(np.maximum(xs[0], xs[1]), xs[2]))
    np.testing.assert_array_equal(run("math.min", xs[0]), xs[0])
    a, b = rng.random((3, 1)) < 0.5, rng.random((4,)) < 0.5
    for name, fn in [("math.and", np.logical_and), ("math.or", np.logical_or), ("math.xor", np.logical_xor)]:
        np.testing.assert_array_equal(run(name, a, b), fn(a, b))
    i = np.array([0b1100, -1, 7], np.int16)
    np.testing.assert_array_equal(run("math.bitwise_not", i), ~i)
    np.testing.assert_array_equal(run("math.bitwise_xor", i, np.int16(5)), i ^ 5)


def test_equal_strings_and_where_strings():
    a = np.array(["a", "bc", ""], dtype=object)
    np.testing.assert_array_equal(run("math.equal", a, np.array(["bc"], dtype=object)), [False, True, False])
    got = run("math.where", np.array([True, False, True]), a, np.array(["z"], dtype=object))
    assert got.dtype == object and list(got) == ["a", "z", ""]


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_narrow_floats_round_once(dtype):
    x = np.linspace(-3, 3, 17).astype(dtype)
    for name, fn in [("math.exp", np.exp), ("math.erf", np.vectorize(math.erf)), ("nn.sigmoid",
                                                                                 lambda v: 1 / (1 + np.exp(-v)))]:
        got = run(name, x)
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got, fn(x.astype(np.float64)).astype(np.float32).astype(dtype))


def test_is_inf_is_nan_and_float8():
    x = np.array([np.inf, -np.inf, np.nan, 1.0], np.float32)
    np.testing.assert_array_equal(run("math.is_inf", x), [True, True, False, False])
    np.testing.assert_array_equal(run("math.is_inf", x, detect_positive=0), [False, True, False, False])
    np.testing.assert_array_equal(run("math.is_nan", x.astype(ml_dtypes.float8_e5m2)), [False, False, True, False])


# ---------------------------------------------------------------------------------------------
# casts


def test_cast_float8_saturate():
    x = np.array([1e6, -1e6, np.inf, np.nan, 0.3], np.float32)
    sat = run("math.cast", x, to="float8_e4m3fn")
    np.testing.assert_array_equal(sat.astype(np.float32)[:3], [448, -448, 448])
    assert np.isnan(sat.astype(np.float32)[3])
    raw = run("math.cast", x, to="float8_e5m2", saturate=0).astype(np.float32)
    np.testing.assert_array_equal(raw[:3], [np.inf, -np.inf, np.inf])


def test_cast_e8m0_round_modes():
    x = np.array([0.124, 0.25, 1.1, 1.6, 3.0], np.float32)
    as_f = lambda **kw: run("math.cast", x, to="float8_e8m0fnu", **kw).astype(np.float32)
    np.testing.assert_array_equal(as_f(), [0.125, 0.25, 2, 2, 4])
    np.testing.assert_array_equal(as_f(round_mode="down"), [0.0625, 0.25, 1, 1, 2])
    np.testing.assert_array_equal(as_f(round_mode="nearest"), [0.125, 0.25, 1, 2, 4])
    assert np.isnan(run("math.cast", np.float32([np.inf]), to="float8_e8m0fnu", saturate=0).astype(np.float32)[0])


def test_cast_strings_round_trip():
    x = np.array([3.5, -1e-5, np.inf, -np.inf, np.nan], np.float32)
    s = run("math.cast", x, to="string")
    assert s.dtype == object and list(s[2:]) == ["INF", "-INF", "NaN"]
    back = run("math.cast", s, to="float32")
    np.testing.assert_array_equal(back, x)
    ints = run("math.cast", np.array(["12", " -7", "1e3", "100.5", "18446744073709551615"][:4], dtype=object),
               to="int16")
    assert ints.dtype == np.int16 and list(ints) == [12, -7, 1000, 100]
    big = run("math.cast", np.array(["18446744073709551615"], dtype=object), to="uint64")
    assert big[0] == np.iinfo(np.uint64).max
    np.testing.assert_array_equal(run("math.cast", np.array([True, False]), to="string"), ["1", "0"])


def test_cast_int_wraps_and_small_ints():
    np.testing.assert_array_equal(run("math.cast", np.array([200, -129], np.int16), to="int8"), [-56, 127])
    np.testing.assert_array_equal(run("math.cast", np.array([0.0, -0.0, 2.0, np.nan]), to="bool"),
                                  [False, False, True, True])
    got = run("math.cast", np.array([-8, 7, 3], np.float32), to="int4")
    assert got.dtype == ml_dtypes.int4 and list(got.astype(np.int8)) == [-8, 7, 3]


def test_bit_cast():
    f = np.array([1.0, -2.5], np.float32)
    np.testing.assert_array_equal(run("math.bit_cast", f, to="int32"), f.view(np.int32))
    s = run("math.bit_cast", np.float64(1.5).reshape(()), to="uint64")
    assert s.shape == () and s == np.float64(1.5).view(np.uint64)
    np.testing.assert_array_equal(run("math.bit_cast", np.array([-1, 7], ml_dtypes.int4), to="uint4").astype(np.uint8),
                                  [15, 7])


# ---------------------------------------------------------------------------------------------
# type relations


def test_broadcast_with_symbolic_dims():
    f32 = lambda *s: TensorType(s, "float32")
    assert infer("math.add", f32(N, 1, 3), f32(4, 3)) == f32(N, 4, 3)
    assert infer("math.mul", f32(N, 3), f32(5, 1)) == f32(5, 3)
    assert infer("math.sub", f32(N), f32(SizeVar("M"))) == f32(ANY)
    assert infer("math.greater", f32(N, 3), f32(3)) == TensorType((N, 3), "bool")
    assert infer("math.max", f32(N, 1), f32(1, 2), f32(2)) == f32(N, 2)
    assert infer("math.add", TensorType(None, "float32"), f32(3)) == TensorType(None, "float32")
    assert infer("math.where", TensorType((N, 1), "bool"), f32(1, 4), f32(4)) == f32(N, 4)
    assert infer("math.pow", TensorType((N,), "int32"), f32(1)) == TensorType((N,), "int32")
    assert infer("nn.relu", f32(N, 7)) == f32(N, 7)
    assert infer("math.is_nan", TensorType((N,), "float16")) == TensorType((N,), "bool")
    assert infer("math.cast", f32(N), to="int4") == TensorType((N,), "int4")
    assert infer("math.clip", f32(N), None, TensorType((), "float32")) == f32(N)


@pytest.mark.parametrize("name,types,attrs,match", [
    ("math.add", [TensorType((2, 3), "float32"), TensorType((4,), "float32")], {}, "do not broadcast"),
    ("math.add", [TensorType((3,), "float32"), TensorType((3,), "int32")], {}, "share one dtype"),
    ("math.add", [TensorType((3,), "bool"), TensorType((3,), "bool")], {}, "dtype bool"),
    ("math.and", [TensorType((3,), "int32"), TensorType((3,), "int32")], {}, "dtype int32"),
    ("math.sin", [TensorType((3,), "int32")], {}, "dtype int32"),
    ("math.neg", [TensorType((3,), "uint8")], {}, "dtype uint8"),
    ("math.where", [TensorType((3,), "int32"), TensorType((3,), "float32"), TensorType((3,), "float32")], {},
     "condition"),
    ("math.clip", [TensorType((3,), "float32"), TensorType((2,), "float32")], {}, "scalar"),
    ("math.bit_cast", [TensorType((3,), "float32")], {"to": "int64"}, "32 bits"),
    ("nn.gelu", [TensorType((3,), "float32")], {"approximate": "fast"}, "approximate"),
    ("math.mod", [TensorType((3,), "int32")] * 2, {"fmod": 2}, "fmod"),
    ("math.bit_shift", [TensorType((3,), "uint8")] * 2, {"direction": "UP"}, "direction"),
    ("math.cast", [TensorType((3,), "float32")], {"to": "float8_e4m3fn", "round_mode": "odd"}, "round_mode"),
])
def test_type_errors(name, types, attrs, match):
    with pytest.raises(TypeInferenceError, match=match):
        infer(name, *types, **attrs)


def test_family_ops_are_math_or_nn():
    ops = [v for v in vars(ew).values() if isinstance(v, OpDef)]
    assert len(ops) >= 68 and all(op.name.split(".")[0] in ("math", "nn") for op in ops)


# ---------------------------------------------------------------------------------------------
# converters: older opsets and normalizations


def _import_run(nodes, ins, outs, feeds, opset, inits=()):
    return kiln.evaluate(kiln.from_onnx(model(nodes, ins, outs, inits, opset=opset, ir_version=4)), feeds)


def test_add6_axis_broadcast_with_constant_b():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    b = helper.make_tensor("b", TensorProto.FLOAT, [3], [10, 20, 30])
    node = helper.make_node("Add", ["x", "b"], ["y"], broadcast=1, axis=1)
    (y,) = _import_run([node], [("x", TensorProto.FLOAT, [2, 3, 4])], [("y", TensorProto.FLOAT, [2, 3, 4])],
                       {"x": x}, 6, [b])
    np.testing.assert_array_equal(y, x + np.array([10, 20, 30], np.float32)[:, None])


def test_add6_axis_broadcast_needs_constant():
    node = helper.make_node("Mul", ["x", "b"], ["y"], broadcast=1, axis=0)
    m = model([node], [("x", TensorProto.FLOAT, [2, 3]), ("b", TensorProto.FLOAT, [2])],
              [("y", TensorProto.FLOAT, [2, 3])], opset=6, ir_version=3)
    with pytest.raises(ImportError_, match="constant"):
        kiln.from_onnx(m)


def test_clip6_attributes_and_cast1_string_to():
    x = np.array([-3, 0.5, 3], np.float32)
    nodes = [helper.make_node("Clip", ["x"], ["c"], min=-1.0, max=1.0),
             helper.make_node("Cast", ["c"], ["y"], to="INT32")]
    (y,) = _import_run(nodes, [("x", TensorProto.FLOAT, [3])], [("y", TensorProto.INT32, [3])], {"x": x}, 5)
    np.testing.assert_array_equal(y, [-1, 0, 1])


def test_prelu6_channel_slope():
    x = np.random.default_rng(7).standard_normal((2, 3, 4)).astype(np.float32)
    slope = helper.make_tensor("s", TensorProto.FLOAT, [3], [0.1, 0.2, 0.3])
    node = helper.make_node("PRelu", ["x", "s"], ["y"])
    (y,) = _import_run([node], [("x", TensorProto.FLOAT, [2, 3, 4])], [("y", TensorProto.FLOAT, [2, 3, 4])],
                       {"x": x}, 6, [slope])
    np.testing.assert_allclose(y, np.where(x < 0, x * np.array([0.1, 0.2, 0.3], np.float32)[:, None], x))


def test_castlike_and_identity_fold_away():
    nodes = [helper.make_node("CastLike", ["x", "like"], ["c"]), helper.make_node("Identity", ["c"], ["y"])]
    m = model(nodes, [("x", TensorProto.FLOAT, ["N"]), ("like", TensorProto.INT64, [1])],
              [("y", TensorProto.INT64, ["N"])])
    mod = kiln.from_onnx(m)
    out = mod.main.body.fields[0]
    assert out.op.name == "math.cast" and out.type == TensorType((N,), "int64")
    (y,) = kiln.evaluate(mod, {"x": np.array([1.7, -2.2], np.float32), "like": np.zeros(1, np.int64)})
    np.testing.assert_array_equal(y, [1, -2])
