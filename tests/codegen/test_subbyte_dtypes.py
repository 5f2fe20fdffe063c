"""int4/uint4/int2/uint2 in compiled kernels: one value per byte in its low bits (ml_dtypes' layout),
read sign-extended whatever the high bits hold, written as the low bits alone; casts convert like
ml_dtypes (floats through int32, integers wrap) and arithmetic wraps. Also: float64 -> float16 rounds
once like numpy, and math.cast to and from these dtypes (and to float8_e8m0fnu) compiles and matches
the interpreter."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import kiln
from kiln.codegen import build_library
from kiln.ir import Function, IRModule, Tuple, Var
from kiln.ir.dtype import from_numpy, to_numpy
from kiln.ir.types import TensorType
from kiln.op import get_op
from kiln.tir import Add, Buffer, BufferStore, Cast, FloatImm, For, ForKind, IntImm, Mul, PrimFunc, Ramp, Sub, seq
from kiln.tir import Var as TVar
from kiln.tir.arith import Simplifier

from .conftest import requires_gcc

pytestmark = requires_gcc
SUB = ["int4", "uint4", "int2", "uint2"]
rng = np.random.default_rng(11)


def kernel(name: str, n: int, in_dtypes: list[str], out_dtype: str, fn, lanes: int = 1) -> PrimFunc:
    """O[i] = fn(I0[i], I1[i], ...) over n elements, `lanes` at a time (vector loads and stores)."""
    i = TVar("i")
    ins = [Buffer(f"I{k}", (IntImm(n),), d) for k, d in enumerate(in_dtypes)]
    dst = Buffer("O", (IntImm(n),), out_dtype)
    at = Ramp(i * lanes, IntImm(1), lanes) if lanes > 1 else i
    body = BufferStore(dst, fn(*(b[at] for b in ins)), (at,))
    return PrimFunc(name, (*ins, dst), For(i, IntImm(0), IntImm(n // lanes), ForKind.SERIAL, body))


def run(cache, func: PrimFunc, xs: list[np.ndarray], out_dtype: str) -> np.ndarray:
    return run_many(cache, [(func, xs, out_dtype)])[0]


def run_many(cache, runs: list[tuple[PrimFunc, list[np.ndarray], str]]) -> list[np.ndarray]:
    """Several kernels (distinct names) compiled as one module (one gcc run), each run on its inputs."""
    lib = build_library([f for f, _, _ in runs], "subbyte", cache=cache)
    outs = []
    for f, xs, out_dtype in runs:
        outs.append(np.zeros(xs[0].shape, to_numpy(out_dtype)))
        lib.get_function(f.name)(*xs, outs[-1])
    return outs


def every_value(dtype: str) -> np.ndarray:
    info = ml_dtypes.iinfo(to_numpy(dtype))
    return np.arange(int(info.min), int(info.max) + 1).astype(to_numpy(dtype))


def as_ints(x: np.ndarray) -> np.ndarray:
    return x.astype(np.int64)


@pytest.mark.parametrize("dtype", SUB)
def test_every_byte_decodes_like_ml_dtypes(cache, dtype):
    """High bits of a stored byte are ignored, as ml_dtypes ignores them."""
    x = np.arange(256, dtype=np.uint8).view(to_numpy(dtype))
    got = run(cache, kernel("dec", x.size, [dtype], "int32", lambda v: Cast("int32", v)), [x], "int32")
    np.testing.assert_array_equal(got, x.astype(np.int32))


@pytest.mark.parametrize("dtype", SUB)
def test_stores_write_the_low_bits_only(cache, dtype):
    x = np.arange(256, dtype=np.uint8).view(to_numpy(dtype))  # high bits set on most inputs
    got = run(cache, kernel("copy", x.size, [dtype], dtype, lambda v: v), [x], dtype)
    np.testing.assert_array_equal(as_ints(got), as_ints(x))
    np.testing.assert_array_equal(got.view(np.uint8), as_ints(x).astype(to_numpy(dtype)).view(np.uint8))
    assert (got.view(np.uint8) >> (4 if dtype.endswith("4") else 2) == 0).all()


def float_inputs(src: str) -> np.ndarray:
    grid = np.arange(-40, 40.25, 0.25)
    special = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 7.5, -8.5, 15.99, 16.0,
               2147483647.0, 2147483648.0, 2147483649.0, 2147483653.0, -2147483648.0, -2147483649.0,
               -2147483653.0, 1e10, -1e10, 2.0 ** 40 + 5, 1e30, -1e30, 65504.0, 65536.0 + 3, 300.0, -300.0]
    x = np.concatenate([grid, special, rng.standard_normal(500) * 1000])
    with np.errstate(all="ignore"):
        return x.astype(to_numpy(src))


@pytest.mark.parametrize("dtype", SUB)
def test_float_to_subbyte_like_ml_dtypes(cache, dtype):
    """Truncation toward zero, then the low bits of the int32 (NaN and out-of-int32 values give 0)."""
    srcs = ["float16", "bfloat16", "float32", "float64"]
    xs = [float_inputs(src) for src in srcs]
    got = run_many(cache, [(kernel(f"f2i_{src}", x.size, [src], dtype, lambda v: Cast(dtype, v)), [x], dtype)
                           for src, x in zip(srcs, xs)])
    for src, x, g in zip(srcs, xs, got):
        with np.errstate(all="ignore"):
            expect = x.astype(to_numpy(dtype))
        np.testing.assert_array_equal(as_ints(g), as_ints(expect), err_msg=src)


def int_inputs(src: str) -> np.ndarray:
    if src == "bool":
        return np.array([True, False, True])
    info = np.iinfo(to_numpy(src))
    edges = np.array([info.min, info.max, 0, 1, 2, 3, 7, 8, 9, 15, 16, 17], dtype=object)
    edges = np.concatenate([edges, [v for v in (-1, -2, -3, -7, -8, -9, -16, -17) if v >= info.min]])
    return np.concatenate([edges.astype(to_numpy(src)),
                           rng.integers(int(info.min), int(info.max), 301, dtype=to_numpy(src), endpoint=True)])


@pytest.mark.parametrize("dtype", SUB)
def test_int_to_subbyte_wraps(cache, dtype):
    srcs = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]
    xs = [int_inputs(src) for src in srcs]
    got = run_many(cache, [(kernel(f"i2i_{src}", x.size, [src], dtype, lambda v: Cast(dtype, v)), [x], dtype)
                           for src, x in zip(srcs, xs)])
    for src, x, g in zip(srcs, xs, got):
        np.testing.assert_array_equal(as_ints(g), as_ints(x.astype(to_numpy(dtype))), err_msg=src)


@pytest.mark.parametrize("dtype", SUB)
def test_subbyte_to_every_dtype(cache, dtype):
    dsts = ["bool", "int8", "uint8", "int32", "int64", "uint64", "float16", "bfloat16", "float32", "float64",
            "float8_e4m3fn", "float4_e2m1fn", "int4", "uint2"]
    x = np.arange(256, dtype=np.uint8).view(to_numpy(dtype))
    got = run_many(cache, [(kernel(f"i2x_{d}", x.size, [dtype], d, lambda v, d=d: Cast(d, v)), [x], d) for d in dsts])
    for dst, g in zip(dsts, got):
        with np.errstate(all="ignore"):  # NOTE: ml_dtypes has no int4 -> uint2 cast: wrap through int64 (ONNX's rule)
            expect = (x.astype(np.int64) if dst in SUB else x).astype(to_numpy(dst))
        np.testing.assert_array_equal(g.astype(np.float64), expect.astype(np.float64), err_msg=dst)


@pytest.mark.parametrize("lanes", [1, 8])
@pytest.mark.parametrize("dtype", SUB)
def test_arithmetic_wraps_scalar_and_vector(cache, dtype, lanes):
    """Every pair of values: +, -, * wrap to the dtype, in scalar code and GCC vector code alike."""
    v = every_value(dtype)
    a, b = (m.reshape(-1) for m in np.meshgrid(v, v))
    a, b = np.tile(a, 8 // np.gcd(a.size, 8)), np.tile(b, 8 // np.gcd(b.size, 8))
    ops = ((Add, np.add), (Sub, np.subtract), (Mul, np.multiply))
    got = run_many(cache, [(kernel(f"arith_{op.__name__}", a.size, [dtype, dtype], dtype, op, lanes), [a, b], dtype)
                           for op, _ in ops])
    for (op, ref), g in zip(ops, got):
        np.testing.assert_array_equal(as_ints(g), as_ints(ref(as_ints(a), as_ints(b)).astype(to_numpy(dtype))),
                                      err_msg=op.__name__)


def test_float64_to_float16_rounds_once_like_numpy(cache):
    """A double just above a float16 midpoint must round up, though rounding it to float first lands
    exactly on the midpoint (and would round to even)."""
    ulps = np.float64(2.0) ** np.arange(-24, 16)
    mids = np.concatenate([ulps * (1 + 2.0 ** -11), 1 + 2.0 ** -11 + np.array([2.0 ** -40, -(2.0 ** -40), 0.0])])
    x = np.concatenate([mids, -mids, mids * (1 + 2.0 ** -45), rng.standard_normal(2000) * 100,
                        rng.standard_normal(500) * 1e-6, [65519.99, 65520.0, 65520.0001, 1e300, -1e300, 5e-324,
                                                          2.0 ** -25, 2.0 ** -25 * (1 + 2.0 ** -40), np.nan, np.inf]])
    got = run(cache, kernel("d2h", x.size, ["float64"], "float16", lambda v: Cast("float16", v)), [x], "float16")
    expect = x.astype(np.float16)
    assert np.array_equal(np.isnan(got), np.isnan(expect))
    np.testing.assert_array_equal(got.view(np.uint16)[~np.isnan(got)], expect.view(np.uint16)[~np.isnan(expect)])


# ---------------------------------------------------------------------------------------------
# math.cast through the executor: no host groups, the interpreter's numbers



def casts_compile_like_interpreter(x: np.ndarray, attrs: list[dict]) -> None:
    from kiln.compiler.lower import build_graph_executor as build_executor

    v = Var("x", TensorType(x.shape, from_numpy(x.dtype)))
    mod = IRModule({"main": Function((v,), Tuple([get_op("math.cast")(v, **a) for a in attrs]))})
    cm = build_executor(mod)
    assert cm.host_groups == [], cm.host_groups
    with np.errstate(all="ignore"):
        want, got = kiln.evaluate(mod, {"x": x}), cm.run({"x": x})
    for a, g, w in zip(attrs, got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, a
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        np.testing.assert_array_equal(g64, w64, err_msg=str(a))  # NaN == NaN here


@pytest.mark.parametrize("shape", [(1,), (7, 1, 3)])
@pytest.mark.parametrize("src", ["float16", "float32", "float64", "int32", "uint8"])
def test_cast_to_subbyte_ops(shape, src):
    n = int(np.prod(shape))
    if src.startswith("float"):
        vals = float_inputs(src)
        x = vals[rng.permutation(vals.size)[:n]]
    else:
        info = np.iinfo(to_numpy(src))
        x = rng.integers(int(info.min), int(info.max), n, dtype=to_numpy(src), endpoint=True)
    casts_compile_like_interpreter(x.reshape(shape), [{"to": d} for d in SUB])


@pytest.mark.parametrize("dtype", SUB)
def test_cast_from_subbyte_ops(dtype):
    x = np.arange(256, dtype=np.uint8)[rng.permutation(256)[:3 * 5 * 11]].view(to_numpy(dtype)).reshape(3, 5, 11)
    casts_compile_like_interpreter(x, [{"to": d} for d in ("float32", "float16", "int8", "uint8", "int64",
                                                          "float8_e5m2", "bool", dtype)])


@pytest.mark.parametrize("dtype", SUB)
def test_casts_between_subbyte_ints_wrap_in_both_paths(dtype):
    """ml_dtypes has no direct cast between its sub-byte ints: the interpreter goes through int64."""
    x = np.arange(256, dtype=np.uint8)[rng.permutation(256)[:2 * 7]].view(to_numpy(dtype)).reshape(2, 7)
    casts_compile_like_interpreter(x, [{"to": d} for d in SUB if d != dtype])
    wide = x.astype(np.int64)
    for d in SUB:
        bits = 4 if d.endswith("4") else 2
        v = Var("x", TensorType(x.shape, dtype))
        (got,) = kiln.evaluate(IRModule({"main": Function((v,), get_op("math.cast")(v, to=d))}), {"x": x})
        want = wide & ((1 << bits) - 1)
        if not d.startswith("u"):
            want = np.where(want >= 1 << (bits - 1), want - (1 << bits), want)
        np.testing.assert_array_equal(np.asarray(got).astype(np.int64), want, err_msg=d)


def e8m0_inputs() -> np.ndarray:
    p = np.float64(2.0) ** np.arange(-149, 128)
    tricky = np.concatenate([p, p * 1.5, p * np.nextafter(1.5, 2), p * np.nextafter(1.5, 1), p * 1.25, p * 1.75])
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 3.4028234663852886e38, 1e-45, 5.877472e-39, -2.0, -3.0])
    return np.concatenate([tricky, -tricky[::7], special, rng.standard_normal(97) * 50])


@pytest.mark.parametrize("src", ["float16", "float32", "float64"])
def test_cast_to_e8m0_every_mode(src):
    with np.errstate(all="ignore"):
        x = e8m0_inputs().astype(to_numpy(src))
    attrs = [{"to": "float8_e8m0fnu", "saturate": s, "round_mode": r} for s in (0, 1) for r in ("up", "down", "nearest")]
    casts_compile_like_interpreter(x, attrs)


@pytest.mark.parametrize("dtype", SUB)
def test_tir_constant_folding_agrees_with_c(cache, dtype):
    """The tir simplifier folds sub-byte casts and arithmetic to the values the C code computes."""
    exprs = [Cast(dtype, FloatImm(v, "float64")) for v in (-9.5, 7.9, 100.0, 1e10, float("nan"), -0.5)]
    exprs += [Cast(dtype, IntImm(v, "int32")) for v in (-17, 9, 255)]
    vals = every_value(dtype).tolist()
    exprs += [op(IntImm(int(a), dtype), IntImm(int(b), dtype)) for op in (Add, Sub, Mul) for a in vals for b in vals[::2]]
    i = TVar("i")
    dst = Buffer("O", (IntImm(len(exprs)),), dtype)
    body = seq(*(BufferStore(dst, e, (IntImm(k),)) for k, e in enumerate(exprs)))
    f = PrimFunc("consts", (dst,), For(i, IntImm(0), IntImm(1), ForKind.SERIAL, body))
    out = np.zeros(len(exprs), to_numpy(dtype))
    build_library([f], "subbyte", cache=cache).get_function("consts")(out)
    folded = [Simplifier()(e) for e in exprs]
    assert all(isinstance(x, IntImm) and x.dtype == dtype for x in folded)
    np.testing.assert_array_equal(as_ints(out), [x.value for x in folded])


BIT_CASTS = [("int4", "uint4"), ("uint4", "int4"), ("int2", "uint2"), ("uint2", "int2"), ("int4", "float4_e2m1fn"),
             ("uint4", "float4_e2m1fn"), ("float4_e2m1fn", "int4"), ("float4_e2m1fn", "uint4")]


@pytest.mark.parametrize("src,dst", BIT_CASTS)
def test_bit_cast_sub_byte_compiles_like_interpreter(src, dst):
    """Every code, bit-cast alone and fused with a cast to float32 (the value in the register)."""
    from kiln.compiler.lower import build_graph_executor as build_executor

    codes = np.arange(16 if "4" in src else 4, dtype=np.uint8)
    x = codes[rng.integers(0, codes.size, (5, 13))].view(to_numpy(src))
    v = Var("x", TensorType(x.shape, src))
    b = get_op("math.bit_cast")(v, to=dst)
    for out in (b, get_op("math.cast")(b, to="float32")):
        mod = IRModule({"main": Function((v,), out)})
        cm = build_executor(mod)
        assert cm.host_groups == [], cm.host_groups
        g, w = np.asarray(cm.run({"x": x})[0]), np.asarray(kiln.evaluate(mod, {"x": x})[0])
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g.astype(np.float64), w.astype(np.float64))
        np.testing.assert_array_equal(np.signbit(g.astype(np.float64)), np.signbit(w.astype(np.float64)))


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e8m0fnu", "float4_e2m1fn"])
def test_vector_reinterpret_of_small_floats(cache, dtype):
    """8 lanes at a time: bytes -> a small float and back, lane by lane through each byte."""
    from kiln.tir import Call

    codes = np.arange(16 if dtype.startswith("float4") else 256, dtype=np.uint8)
    x = np.tile(codes, 8 // np.gcd(codes.size, 8))
    to = run(cache, kernel("vbits", x.size, ["uint8"], dtype, lambda v: Call(f"{dtype}x8", "reinterpret", (v,)), 8),
             [x], dtype)
    nan = np.isnan(x.view(to_numpy(dtype)).astype(np.float32))
    np.testing.assert_array_equal(to.view(np.uint8)[~nan], x[~nan])
    back = run(cache, kernel("vunbits", x.size, [dtype], "uint8", lambda v: Call("uint8x8", "reinterpret", (v,)), 8),
               [x.view(to_numpy(dtype))], "uint8")
    np.testing.assert_array_equal(back[~nan], x[~nan])
