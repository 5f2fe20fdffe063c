"""Quantization to and from the narrow dtypes (int4/uint4/int2/uint2, float8, float4), dynamic
quantization and ConvInteger: compiled by the executor with no host group and equal to the
interpreter (kiln.op.quant / kiln.op.nn references) on odd shapes, ties, saturation and specials."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import kiln
from kiln.ir import Function, IRModule, Tuple, TupleGetItem, Var
from kiln.ir.dtype import from_numpy, to_numpy
from kiln.ir.types import TensorType
from kiln.op import get_op
from tests.codegen.conftest import requires_gcc

pytestmark = requires_gcc
rng = np.random.default_rng(23)
SUB_INTS = ["int4", "uint4", "int2", "uint2"]
FLOAT8 = ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"]



def compiled_matches_interpreter(build_outputs, feeds: dict[str, np.ndarray]) -> None:
    """build_outputs(vars by name) -> output exprs; the compiled module runs nothing on the host and
    gives the interpreter's values bit for bit (NaN anywhere the interpreter has NaN)."""
    from kiln.compiler.lower import build_graph_executor as build

    vs = {k: Var(k, TensorType(a.shape, from_numpy(a.dtype))) for k, a in feeds.items()}
    outs = build_outputs(vs)
    mod = IRModule({"main": Function(tuple(vs.values()), Tuple(outs) if isinstance(outs, list) else outs)})
    cm = build(mod)
    assert cm.host_groups == [], cm.host_groups
    with np.errstate(all="ignore"):
        want, got = kiln.evaluate(mod, feeds), cm.run(feeds)
    want, got = (list(w) if isinstance(w, (list, tuple)) else [w] for w in (want, got))
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (k, g.shape, g.dtype, w.shape, w.dtype)
        np.testing.assert_array_equal(g.astype(np.float64), w.astype(np.float64), err_msg=f"output {k}")


def quant_inputs(shape: tuple[int, ...], spread: float) -> np.ndarray:
    """Random values, exact ties (k + 0.5 at scale 1) and specials, as float32 of `shape`."""
    n = int(np.prod(shape))
    ties = np.arange(-9, 9) + 0.5
    special = np.array([0.0, -0.0, 1e9, -1e9, np.inf, -np.inf, 3.4e38])
    pool = np.concatenate([ties, special, rng.standard_normal(n) * spread]).astype(np.float32)
    return pool[rng.permutation(pool.size)[:n]].reshape(shape)


def zero_point(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    t = to_numpy(dtype)
    if dtype in SUB_INTS:
        info = ml_dtypes.iinfo(t)
        return rng.integers(int(info.min), int(info.max), shape, endpoint=True).astype(t)
    return (rng.standard_normal(shape) * 2).astype(t)


GRANULARITY = {  # name -> (x shape, scale shape, attrs)
    "tensor": ((1, 7, 3), (), {}),
    "axis": ((2, 5, 3), (5,), {"axis": 1}),
    "block": ((3, 2, 7), (3, 2, 3), {"axis": 2, "block_size": 3}),
}


@pytest.mark.parametrize("out", SUB_INTS + FLOAT8 + ["float4_e2m1fn"])
def test_quantize_linear_narrow(out):
    """Per tensor, axis and block; with and without a zero point; float targets saturating and not."""
    q = get_op("quant.quantize_linear")
    sats = (0, 1) if out.startswith("float") else (1,)
    feeds = {}
    for g, (xs, ss, _) in GRANULARITY.items():
        feeds.update({f"x_{g}": quant_inputs(xs, 20 if out.startswith("float") else 3),
                      f"s_{g}": rng.uniform(0.5, 2, ss).astype(np.float32), f"z_{g}": zero_point(out, ss),
                      f"one_{g}": np.ones(ss, np.float32)})

    def outputs(v):
        res = []
        for g, (_, _, attrs) in GRANULARITY.items():
            x, s, z = v[f"x_{g}"], v[f"s_{g}"], v[f"z_{g}"]
            res.append(q(x, v[f"one_{g}"], z, **attrs))  # ties at scale 1
            for sat in sats:
                res += [q(x, s, z, saturate=sat, **attrs), q(x, s, output_dtype=out, saturate=sat, **attrs)]
        return res

    compiled_matches_interpreter(outputs, feeds)


@pytest.mark.parametrize("out", ["int4", "float8_e4m3fn"])
def test_quantize_linear_float16_input_and_e8m0_scale(out):
    x = quant_inputs((3, 11), 10)
    feeds = {"x": x.astype(np.float16), "s": np.array(0.75, np.float16), "x32": x,
             "e": np.array(0.5, ml_dtypes.float8_e8m0fnu)}
    q = get_op("quant.quantize_linear")
    compiled_matches_interpreter(lambda v: [q(v["x"], v["s"], output_dtype=out),
                                            q(v["x32"], v["e"], output_dtype=out)], feeds)


@pytest.mark.parametrize("src", SUB_INTS + FLOAT8 + ["float4_e2m1fn"])
def test_dequantize_linear_narrow(src):
    """Per tensor, axis and block; every stored code (NaN ones included), float32 and float16 scales."""
    codes = np.arange(16 if src.startswith("float4") else 256, dtype=np.uint8)
    feeds = {}
    for g, (xs, ss, _) in GRANULARITY.items():
        feeds.update({f"x_{g}": codes[rng.integers(0, codes.size, xs)].view(to_numpy(src)),
                      f"s_{g}": rng.uniform(0.1, 3, ss).astype(np.float32), f"z_{g}": zero_point(src, ss),
                      f"h_{g}": rng.uniform(0.1, 3, ss).astype(np.float16)})
    d = get_op("quant.dequantize_linear")

    def outputs(v):
        res = []
        for g, (_, _, attrs) in GRANULARITY.items():
            x, s, z, h = v[f"x_{g}"], v[f"s_{g}"], v[f"z_{g}"], v[f"h_{g}"]
            res += [d(x, s, z, **attrs), d(x, s, **attrs), d(x, h, z, **attrs), d(x, h, output_dtype="float32", **attrs)]
        return res

    compiled_matches_interpreter(outputs, feeds)


def test_dequantize_linear_e8m0_scale():
    feeds = {"x": np.arange(-8, 8).astype(ml_dtypes.int4).reshape(2, 8),
             "e": np.array([0.25, 8.0], ml_dtypes.float8_e8m0fnu)}
    d = get_op("quant.dequantize_linear")
    compiled_matches_interpreter(lambda v: [d(v["x"], v["e"], axis=0, output_dtype="float32"),
                                            d(v["x"], v["e"], axis=0, output_dtype="bfloat16")], feeds)


DYNAMIC = {
    "mixed": rng.standard_normal((3, 1, 5)).astype(np.float32) * 4,
    "positive": np.abs(rng.standard_normal(7)).astype(np.float32) + 0.5,
    "negative": -np.abs(rng.standard_normal((2, 3))).astype(np.float32) - 1,
    "zeros": np.zeros((5,), np.float32),
    "one": np.array([2.5], np.float32),
    "scalar": np.array(-1.75, np.float32),
    "ties": np.array([0.0, 255.0, 127.5, 128.5, 0.5, 1.5], np.float32),
}


@pytest.mark.parametrize("case", list(DYNAMIC))
def test_dynamic_quantize_linear(case):
    op = get_op("quant.dynamic_quantize_linear")

    def outputs(v):
        t = op(v["x"])
        return [TupleGetItem(t, k) for k in range(3)]

    compiled_matches_interpreter(outputs, {"x": DYNAMIC[case]})


def conv_int_feeds(x_dtype: str, w_dtype: str, xs: tuple[int, ...], ws: tuple[int, ...]) -> dict[str, np.ndarray]:
    def rand(dtype, shape):
        info = np.iinfo(to_numpy(dtype))
        return rng.integers(int(info.min), int(info.max), shape, endpoint=True).astype(to_numpy(dtype))

    return {"x": rand(x_dtype, xs), "w": rand(w_dtype, ws), "xz": rand(x_dtype, ()),
            "wz": rand(w_dtype, ()), "wzc": rand(w_dtype, (ws[0],))}


CONV = {  # name -> (x shape, w shape, attrs)
    "1d": ((1, 3, 11), (5, 3, 3), {"pads": (1, 2), "strides": (2,)}),
    "2d_pad": ((2, 1, 5, 7), (3, 1, 3, 2), {"pads": (1, 1, 0, 1)}),
    "2d_group_dilation": ((1, 4, 7, 6), (6, 2, 2, 3), {"group": 2, "dilations": (2, 1), "strides": (1, 2)}),
    "2d_same_upper": ((1, 2, 5, 5), (1, 2, 2, 2), {"auto_pad": "SAME_UPPER"}),
    "3d": ((1, 2, 3, 4, 5), (2, 2, 2, 1, 3), {"pads": (0, 1, 1, 1, 0, 1)}),
}


@pytest.mark.parametrize("case", list(CONV))
def test_conv_integer(case):
    """uint8/int8 inputs and weights; no zero points, scalar ones, and a per-output-channel weight zero
    point; padding reads the shifted zero (so padded taps add nothing)."""
    xs, ws, attrs = CONV[case]
    c = get_op("nn.conv_integer")
    kinds = {"uu": ("uint8", "uint8"), "ss": ("int8", "int8"), "us": ("uint8", "int8")}
    feeds = {f"{k}_{n}": a for k, dts in kinds.items() for n, a in conv_int_feeds(*dts, xs, ws).items()}

    def outputs(v):
        res = []
        for k in kinds:
            x, w, xz = v[f"{k}_x"], v[f"{k}_w"], v[f"{k}_xz"]
            res += [c(x, w, **attrs), c(x, w, xz, **attrs), c(x, w, xz, v[f"{k}_wz"], **attrs),
                    c(x, w, xz, v[f"{k}_wzc"], **attrs)]
        return res

    compiled_matches_interpreter(outputs, feeds)


def test_zero_points_alike_in_bytes_stay_apart():
    """int4/uint2 (and float8 e4m3fn/e5m2) constants with the same bytes are different values:
    common-subexpression elimination must not merge them (ml_dtypes' dtype.str is '|V1' for all)."""
    from kiln.ir import Constant

    q = get_op("quant.quantize_linear")
    zps = [np.array(1, ml_dtypes.int4), np.array(1, ml_dtypes.uint2), np.array(1, ml_dtypes.float8_e4m3fn),
           np.array(1, ml_dtypes.float8_e5m2)]
    compiled_matches_interpreter(
        lambda v: [q(v["x"], Constant(np.array(0.5, np.float32)), Constant(z)) for z in zps],
        {"x": quant_inputs((2, 9), 4)})


def test_conv_integer_gets_the_conv_schedule(monkeypatch):
    """ConvInteger is a reduction plus an elementwise output, so nn.conv's anchor schedule takes it
    (blocked, vectorized accumulation) instead of the generic one."""
    import kiln.topi.schedule_dispatch as dispatch

    claimed: list[str] = []
    fn = dispatch.ANCHOR_SCHEDULES["c"]["nn.conv_integer"]

    def recording(outputs, target):
        s = fn(outputs, target)
        if s is not None:
            claimed.append(fn.__name__)
        return s

    monkeypatch.setitem(dispatch.ANCHOR_SCHEDULES["c"], "nn.conv_integer", recording)
    c = get_op("nn.conv_integer")
    compiled_matches_interpreter(lambda v: c(v["x"], v["w"], v["xz"], v["wzc"], pads=(1, 1, 1, 1)),
                                 conv_int_feeds("uint8", "int8", (1, 3, 9, 17), (8, 3, 3, 3)))
    assert claimed == ["schedule_conv"]
