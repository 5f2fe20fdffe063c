"""Compiled (C kernel) runs of MatMulInteger, QLinearConv, Binarizer, ArrayFeatureExtractor, MelWeightMatrix
and FlexAttention without modifiers, against the interpreter: odd shapes (1, primes), every dtype the
computes claim, and the cases they leave to the host (with the reason)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from kiln.compiler.lower import build_graph_executor as build
from kiln.ir.dtype import from_numpy
from kiln.ir.expr import Function, Var
from kiln.ir.module import IRModule
from kiln.ir.types import TensorType
from kiln.op import get_op
from tests.topi.harness import rand
from tests.topi.test_misc_numeric import compiled_vs_interpreter

pytestmark = pytest.mark.skipif(__import__("shutil").which("gcc") is None, reason="gcc is not installed")
PAIRS = [("uint8", "uint8"), ("int8", "int8"), ("uint8", "int8"), ("int8", "uint8")]



def full(shape, dtype: str, rng) -> np.ndarray:
    """Values over a dtype's whole range (so the zero-point shifts reach +-255)."""
    info = np.iinfo(dtype)
    return rng.integers(int(info.min), int(info.max), shape, endpoint=True).astype(dtype)


def host_reason(op: str, arrays, **attrs) -> str:
    """Build a one-call model and return why its group has no kernel (it must have none)."""
    params = [Var(f"x{k}", TensorType(a.shape, from_numpy(a.dtype))) for k, a in enumerate(arrays)]
    mod = IRModule({"main": Function(tuple(params), get_op(op)(*params, **attrs))})
    cm = build(mod)
    assert len(cm.host_groups) == 1, cm.host_groups
    return cm.host_groups[0]


# ---------------------------------------------------------------------------------------------
# MatMulInteger

MATMUL = {  # name -> (A shape, B shape, a_zero_point shape, b_zero_point shape); None: absent
    "ones": ((1, 1), (1, 1), (), ()),
    "primes": ((3, 7), (7, 5), None, None),
    "per_row_col": ((5, 3), (3, 11), (5,), (11,)),
    "zp_2d_column": ((3, 13), (13, 2), (3, 1), (1, 2)),
    "batched_broadcast": ((2, 1, 3, 5), (4, 5, 7), (1,), ()),
    "vector_a": ((7,), (7, 3), (), (3,)),
    "vector_b": ((2, 7), (7,), (2,), ()),
    "vectors": ((5,), (5,), (1,), None),
}


@pytest.mark.parametrize("a_dtype,b_dtype", PAIRS)
@pytest.mark.parametrize("case", list(MATMUL))
def test_mat_mul_integer(case, a_dtype, b_dtype):
    rng = np.random.default_rng(1)
    sa, sb, za, zb = MATMUL[case]
    arrays = [full(sa, a_dtype, rng), full(sb, b_dtype, rng), None if za is None else full(za, a_dtype, rng),
              None if zb is None else full(zb, b_dtype, rng)]
    while arrays[-1] is None:
        arrays.pop()
    compiled_vs_interpreter("linalg.mat_mul_integer", None, arrays)


def test_mat_mul_integer_zero_point_not_per_row_runs_on_host():
    rng = np.random.default_rng(2)
    arrays = [full((3, 5), "uint8", rng), full((5, 2), "uint8", rng), full((5,), "uint8", rng)]
    assert "not one per row" in host_reason("linalg.mat_mul_integer", arrays)


# ---------------------------------------------------------------------------------------------
# QLinearConv

CONV = {  # name -> (x shape, w shape, attrs)
    "1d": ((1, 3, 11), (5, 3, 3), {"pads": (1, 2), "strides": (2,)}),
    "ones": ((1, 1, 1, 1), (1, 1, 1, 1), {}),
    "2d_pad": ((2, 1, 5, 7), (3, 1, 3, 2), {"pads": (1, 1, 0, 1)}),
    "2d_group_dilation": ((1, 4, 7, 6), (6, 2, 2, 3), {"group": 2, "dilations": (2, 1), "strides": (1, 2)}),
    "2d_same_lower": ((1, 2, 5, 5), (2, 2, 2, 2), {"auto_pad": "SAME_LOWER"}),
    "3d": ((1, 2, 3, 4, 5), (2, 2, 2, 1, 3), {"pads": (0, 1, 1, 1, 0, 1)}),
}


@pytest.mark.parametrize("x_dtype,w_dtype", PAIRS)
@pytest.mark.parametrize("case", list(CONV))
def test_qlinear_conv(case, x_dtype, w_dtype):
    """Scalar and per-channel w scale/zero point, with and without bias, int8 and uint8 outputs; the
    small y_scale saturates many outputs and the spread of scales rounds many ties."""
    rng = np.random.default_rng(3)
    xs, ws, attrs = CONV[case]
    m = ws[0]
    op = get_op("quant.qlinear_conv")
    for y_dtype in ("uint8", "int8"):
        for per_channel, bias, y_scale in ((False, False, 0.5), (True, True, 0.02), (True, False, 4.0)):
            w_s = rng.uniform(0.002, 0.05, (m,) if per_channel else ()).astype(np.float32)
            w_zp = full((m,) if per_channel else (), w_dtype, rng)
            arrays = [full(xs, x_dtype, rng), np.array(0.03, np.float32), full((), x_dtype, rng), full(ws, w_dtype, rng),
                      w_s, w_zp, np.array(y_scale, np.float32), full((), y_dtype, rng)]
            if bias:
                arrays.append(rng.integers(-20000, 20000, m).astype(np.int32))
            compiled_vs_interpreter("quant.qlinear_conv", op.attrs_type(**attrs), arrays)


def test_qlinear_conv_float8_runs_on_host():
    x = np.ones((1, 1, 3, 3), ml_dtypes.float8_e4m3fn)
    arrays = [x, np.array(1.0, np.float32), np.zeros((), ml_dtypes.float8_e4m3fn), x, np.array(1.0, np.float32),
              np.zeros((), ml_dtypes.float8_e4m3fn), np.array(1.0, np.float32), np.zeros((), np.uint8)]
    assert "has no compute" in host_reason("quant.qlinear_conv", arrays)


# ---------------------------------------------------------------------------------------------
# Binarizer, ArrayFeatureExtractor


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_binarizer(dtype):
    """Thresholds exact, inexact in float32 (0.1) and between integers; NaN and infinities give 0 / 1 / 0."""
    rng = np.random.default_rng(4)
    op = get_op("ml.binarizer")
    for shape in ((1,), (7,), (2, 3, 5), ()):
        for t in (0.0, 0.1, -2.5, 3.0):
            compiled_vs_interpreter("ml.binarizer", op.attrs_type(threshold=t), [rand(shape, dtype, rng)])
    if dtype.startswith("float"):
        x = np.array([0.1, np.nan, np.inf, -np.inf, np.nextafter(0.1, 1, dtype=dtype)], dtype)
        compiled_vs_interpreter("ml.binarizer", op.attrs_type(threshold=0.1), [x])


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_array_feature_extractor(dtype):
    """N-D and 1-D inputs (a 1-D one gives one row), N-D and scalar indices, negative ones."""
    rng = np.random.default_rng(5)
    cases = [((2, 3, 5), np.array([4, 0, -1, 2], np.int64)), ((7,), np.array([[6], [0], [-7]], np.int64)),
             ((1, 1), np.array(0, np.int64)), ((3, 11), np.array([10], np.int64))]
    for shape, idx in cases:
        compiled_vs_interpreter("ml.array_feature_extractor", None, [rand(shape, dtype, rng), idx])


# ---------------------------------------------------------------------------------------------
# MelWeightMatrix

MEL = [(8, 64, 8000, 0.0, 4000.0), (5, 31, 16000, 100.0, 7000.0), (1, 2, 100, 0.0, 50.0), (13, 257, 22050, 30.0, 11025.0),
       (3, 17, 1000, 20.0, 500.0)]


def mel_inputs(bins, n, rate, lo, hi):
    return [np.array(bins, np.int64), np.array(n, np.int64), np.array(rate, np.int32), np.array(lo, np.float32),
            np.array(hi, np.float32)]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8"])
def test_mel_weight_matrix_constant_inputs(dtype):
    attrs = get_op("signal.mel_weight_matrix").attrs_type(output_datatype=dtype)
    for args in MEL:
        compiled_vs_interpreter("signal.mel_weight_matrix", attrs, mel_inputs(*args), const=range(5))


def test_mel_weight_matrix_fed_at_run_time():
    """All five inputs are graph inputs: each set of values compiles a kernel specialized on it."""
    attrs = get_op("signal.mel_weight_matrix").attrs_type(output_datatype="float32")
    feeds = [mel_inputs(*args) for args in MEL]
    compiled_vs_interpreter("signal.mel_weight_matrix", attrs, feeds[0], feeds_list=feeds, specialized=True)


# ---------------------------------------------------------------------------------------------
# FlexAttention

FLEX = {  # name -> (Q, K, V shapes, attrs)
    "ones": ((1, 1, 1, 1), (1, 1, 1, 1), (1, 1, 1, 1), {}),
    "primes": ((2, 3, 7, 5), (2, 3, 11, 5), (2, 3, 11, 5), {"scale": 0.3}),
    "gqa_diff_head_sizes": ((1, 6, 5, 8), (1, 2, 3, 8), (1, 2, 3, 13), {}),
}


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("case", list(FLEX))
def test_flex_attention(case, dtype):
    rng = np.random.default_rng(6)
    sq, sk, sv, attrs = FLEX[case]
    op = get_op("nn.flex_attention")
    arrays = [None, None, rand(sq, dtype, rng), rand(sk, dtype, rng), rand(sv, dtype, rng)]
    compiled_vs_interpreter("nn.flex_attention", op.attrs_type(**attrs), arrays)
    if dtype != "float64":
        compiled_vs_interpreter("nn.flex_attention", op.attrs_type(softmax_precision="float64", **attrs), arrays)


def test_flex_attention_half_softmax_runs_on_host():
    rng = np.random.default_rng(7)
    x = rand((1, 2, 3, 4), "float16", rng)
    q = Var("q", TensorType(x.shape, "float16"))
    from kiln.ir.expr import absent

    call = get_op("nn.flex_attention")(absent(), absent(), q, q, q, softmax_precision="float16")
    cm = build(IRModule({"main": Function((q,), call)}))
    assert any("softmax_precision float16 has no compute" in r for r in cm.host_groups), cm.host_groups


@pytest.mark.parametrize("op,sched,arrays,attrs", [
    ("quant.qlinear_conv", "schedule_conv",
     lambda r: [full((1, 3, 9, 37), "uint8", r), np.array(0.02, np.float32), full((), "uint8", r),
                full((8, 3, 3, 3), "int8", r), r.uniform(0.001, 0.01, 8).astype(np.float32), full((8,), "int8", r),
                np.array(0.3, np.float32), full((), "int8", r), r.integers(-999, 999, 8).astype(np.int32)],
     {"pads": (1, 1, 1, 1)}),
    ("linalg.mat_mul_integer", "schedule_dense",
     lambda r: [full((7, 37), "int8", r), full((37, 45), "uint8", r), full((7,), "int8", r), full((45,), "uint8", r)],
     {})])
def test_integer_anchors_get_their_schedules(monkeypatch, op, sched, arrays, attrs):
    """QLinearConv and MatMulInteger are a reduction plus an elementwise output, so the conv and dense
    anchor schedules (blocked, vectorized) take them, and still give the interpreter's values."""
    import kiln.topi.schedule_dispatch as dispatch

    claimed: list[str] = []
    fn = dispatch.ANCHOR_SCHEDULES["c"][op]

    def recording(outputs, target):
        s = fn(outputs, target)
        if s is not None:
            claimed.append(fn.__name__)
        return s

    monkeypatch.setitem(dispatch.ANCHOR_SCHEDULES["c"], op, recording)
    compiled_vs_interpreter(op, get_op(op).attrs_type(**attrs) if attrs else None, arrays(np.random.default_rng(8)))
    assert claimed == [sched]


def test_array_feature_extractor_constant_index_out_of_range_runs_on_host():
    from kiln.ir.expr import Constant

    x = Var("x", TensorType((2, 3), "float32"))
    call = get_op("ml.array_feature_extractor")(x, Constant(np.array([1, 3], np.int64)))
    cm = build(IRModule({"main": Function((x,), call)}))
    assert any("out of range" in r for r in cm.host_groups), cm.host_groups


def test_qlinear_conv_long_reduction_runs_on_host():
    """More products per output than an int32 accumulator surely holds: the host's int64 reference runs it."""
    x, w = np.zeros((1, 33026, 1, 1), np.uint8), np.zeros((1, 33026, 1, 1), np.uint8)
    arrays = [x, np.array(1.0, np.float32), np.zeros((), np.uint8), w, np.array(1.0, np.float32), np.zeros((), np.uint8),
              np.array(1.0, np.float32), np.zeros((), np.uint8)]
    assert "overflow the int32 accumulator" in host_reason("quant.qlinear_conv", arrays)
