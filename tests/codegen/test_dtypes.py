"""Every numpy-representable ONNX dtype through loads, arithmetic, casts and stores; intrinsics
against kiln.te.eval's numpy semantics."""

import ml_dtypes
import numpy as np
import pytest

from kiln.codegen import FLAGS, build_library
from kiln.ir.dtype import to_numpy
from kiln.te.eval import INTRINSICS
from kiln.tir import And, Buffer, BufferStore, Call, Cast, For, ForKind, IntImm, Max, Min, Not, PrimFunc, Var, const

from .conftest import requires_gcc

pytestmark = requires_gcc
rng = np.random.default_rng(1)
N = 64
NUMERIC = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "bfloat16",
           "float32", "float64"]


def elementwise(name, in_dtypes, out_dtype, fn):
    """out[i] = fn(*ins[i]) over N elements."""
    i = Var("i")
    ins = [Buffer(f"I{k}", (IntImm(N),), d) for k, d in enumerate(in_dtypes)]
    out = Buffer("O", (IntImm(N),), out_dtype)
    body = For(i, IntImm(0), IntImm(N), ForKind.SERIAL, BufferStore(out, fn(*(b[i] for b in ins)), (i,)))
    return PrimFunc(name, (*ins, out), body)


def sample(dtype):
    dt = to_numpy(dtype)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        lo, hi = (info.min, info.max) if info.bits <= 16 or dt.kind == "u" else (-1000, 1000)
        return rng.integers(lo, hi, N, dtype=dt, endpoint=True)
    return rng.uniform(-4, 4, N).astype(dt)


@pytest.mark.parametrize("dtype", NUMERIC)
def test_arithmetic_wraps_and_rounds_like_numpy(compile_fn, dtype):
    f = compile_fn(elementwise("arith", [dtype, dtype], dtype, lambda a, b: a * b + a - const(1, dtype)))
    a, b = sample(dtype), sample(dtype)
    out = np.empty(N, to_numpy(dtype))
    f(a, b, out)
    with np.errstate(over="ignore"):
        expect = a * b + a - to_numpy(dtype).type(1)
    if dtype in ("float16", "bfloat16"):  # computed in float, rounded once at the store
        expect = (a.astype(np.float32) * b.astype(np.float32) + a.astype(np.float32) - 1).astype(to_numpy(dtype))
    if to_numpy(dtype).kind == "f":  # gcc contracts a * b + a into an FMA: one rounding less
        eps = float(np.finfo(to_numpy(dtype)).eps)
        np.testing.assert_allclose(out.astype(np.float64), expect.astype(np.float64), rtol=4 * eps, atol=32 * eps)
    else:
        np.testing.assert_array_equal(out, expect)


@pytest.mark.parametrize("dtype", NUMERIC)
def test_min_max_and_bool(compile_fn, dtype):
    f = compile_fn(elementwise("mm", [dtype, dtype], "bool", lambda a, b: Max(a, b) > Min(a, b)))
    a, b = sample(dtype), sample(dtype)
    a[:4] = b[:4]
    out = np.empty(N, np.bool_)
    f(a, b, out)
    np.testing.assert_array_equal(out, np.maximum(a, b) > np.minimum(a, b))


def test_bool_logic_and_casts(compile_fn):
    f = compile_fn(elementwise("logic", ["bool", "bool", "float32"], "bool",
                               lambda a, b, x: And(a, Not(b)) | Cast("bool", x)))
    a, b = rng.random(N) > 0.5, rng.random(N) > 0.5
    x = np.where(rng.random(N) > 0.7, 0.0, np.nan).astype(np.float32)
    out = np.empty(N, np.bool_)
    f(a, b, x, out)
    np.testing.assert_array_equal(out, (a & ~b) | x.astype(bool))


def special_floats():
    tiny = np.float32(np.finfo(np.float16).smallest_subnormal)
    vals = [0.0, -0.0, np.inf, -np.inf, np.nan, 65504, 65519.99, 65520, 1e-8, tiny / 2, tiny * 1.5, 3 * tiny,
            2.0 ** -14, 1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 3.4e38, -1.0000001, 1.00390625, 1.01171875]
    rest = rng.standard_normal(N - len(vals)) * 10.0 ** rng.integers(-9, 6, N - len(vals))
    return np.concatenate([np.array(vals, np.float32), rest.astype(np.float32)])


@pytest.mark.parametrize("soft", [False, True], ids=["f16c", "software"])
@pytest.mark.parametrize("half", ["float16", "bfloat16"])
def test_half_conversions_round_to_nearest_even(compile_fn, half, soft):
    flags = FLAGS + (("-DKILN_SOFT_F16",) if soft else ())
    to_half = compile_fn(elementwise("to_half", ["float32"], half, lambda x: Cast(half, x)), flags=flags)
    back = compile_fn(elementwise("back", [half], "float32", lambda h: Cast("float32", h)), flags=flags)
    x = special_floats()
    h = np.empty(N, to_numpy(half))
    to_half(x, h)
    with np.errstate(over="ignore"):
        expect = x.astype(to_numpy(half))
    np.testing.assert_array_equal(h.view(np.uint16)[~np.isnan(x)], expect.view(np.uint16)[~np.isnan(x)])
    assert np.isnan(h[np.isnan(x)].astype(np.float32)).all()
    y = np.empty(N, np.float32)
    back(h, y)
    np.testing.assert_array_equal(y, h.astype(np.float32))


@pytest.mark.parametrize("src,dst", [("float32", "int8"), ("int64", "float16"), ("uint64", "float64"),
                                     ("float64", "float32"), ("int32", "bfloat16"), ("uint8", "int64"),
                                     ("bool", "float32"), ("int8", "uint32")])
def test_casts(compile_fn, src, dst):
    f = compile_fn(elementwise("cast", [src], dst, lambda x: Cast(dst, x)))
    x = sample(src) if src != "bool" else rng.random(N) > 0.5
    if src == "float32":
        x = np.clip(x * 30, -128, 127).astype(np.float32)
    out = np.empty(N, to_numpy(dst))
    f(x, out)
    np.testing.assert_array_equal(out, x.astype(to_numpy(dst)))


DOMAIN = {"acosh": (1.1, 5), "log": (0.1, 5), "log1p": (0, 5), "sqrt": (0, 5), "asin": (-0.9, 0.9),
          "acos": (-0.9, 0.9), "atanh": (-0.9, 0.9), "pow": (0.1, 3)}
BINARY = ("pow", "fmod", "bitwise_and", "bitwise_or", "bitwise_xor", "shift_left", "shift_right")


def intrinsic_case(name):
    integer = name.startswith(("bitwise", "shift")) or name == "abs"
    dtype = "int32" if integer else "float32"
    lo, hi = DOMAIN.get(name, (-3, 3))
    x = (rng.integers(-50, 50, N) if integer else rng.uniform(lo, hi, N)).astype(dtype)
    if name in ("round", "nearbyint"):
        x[:4] = [2.5, -2.5, 0.5, 3.5]  # ties: away from zero vs to even
    y = (rng.integers(0, 8, N) if integer else rng.uniform(0.5, 2, N)).astype(dtype)
    out_dtype = "bool" if name in ("isnan", "isinf") else dtype
    args = [x, y][:2 if name in BINARY else 1]
    fn = elementwise(name, [dtype] * len(args), out_dtype, lambda *a: Call(out_dtype, name, a))
    return fn, args, out_dtype


# check_index fails its kernel on a bad index: tests/runtime/test_bad_indices.py
VALUE_INTRINSICS = sorted(n for n in INTRINSICS if n != "check_index")


@pytest.fixture(scope="module")
def intrinsics_module(cache):
    """All intrinsics in one module: one gcc run."""
    cases = {name: intrinsic_case(name) for name in VALUE_INTRINSICS}
    return cases, build_library([fn for fn, _, _ in cases.values()], "intrinsics", cache=cache)


@pytest.mark.parametrize("name", VALUE_INTRINSICS)
def test_intrinsics_match_te_eval(intrinsics_module, name):
    cases, module = intrinsics_module
    _, args, out_dtype = cases[name]
    out = np.empty(N, to_numpy(out_dtype))
    module.get_function(name)(*args, out)
    expect = np.asarray(INTRINSICS[name](*args)).astype(to_numpy(out_dtype))
    np.testing.assert_allclose(out, expect, rtol=2e-6, atol=1e-6)


def test_nan_propagates_through_min_max_and_float64_math(compile_fn):
    f = compile_fn(elementwise("nanmax", ["float64", "float64"], "float64",
                               lambda a, b: Call("float64", "exp", (Max(a, b),)) + Min(a, b)))
    a, b = rng.random(N), rng.random(N)
    a[0], b[1] = np.nan, np.nan
    out = np.empty(N)
    f(a, b, out)
    np.testing.assert_allclose(out, np.exp(np.maximum(a, b)) + np.minimum(a, b))
    assert ml_dtypes.bfloat16 == to_numpy("bfloat16")
