"""Int8Ops: quantized matrix products become integer GEMMs (quant.qgemm, kiln/op/qgemm.py) on x86 CPUs
with AVX2 or AVX-512 VNNI, instead of float kernels between QuantizeLinear and DequantizeLinear.

Bottom-up, one small rule per node, each growing a qgemm out of what it reads:

- a 2-D ungrouped `conv` (or `qlinear_conv`) -> quant.im2col of x in NHWC (kiln/op/im2col.py) times W as
  [kh * kw * C, Co], transposed back to NCHW; between two such convolutions the transposes cancel;
- `mat_mul` / `gemm` of DequantizeLinear(x) (per-tensor constant scale and zero point, uint8 or int8 x)
  and DequantizeLinear(W) (a constant int8 weight, per-tensor or per output column) -> qgemm with a
  float32 output (gemm's alpha, beta and constant C fold into the column scales and bias);
- `mat_mul_integer` with a constant weight (the zero point of A may be a run-time value: dynamic
  quantization) -> qgemm with an int32 output; `cast` to float32 of that -> float32 output;
- `add` of a constant bias, `mul` by a constant per-column or scalar scale or by a run-time scalar
  (DynamicQuantizeLinear's scale times the weight's), `relu` -> folded into the float epilogue;
- `quantize_linear` (per-tensor, constant) of a float32 qgemm -> the qgemm requantizes itself;
- `qlinear_matmul` with a constant B -> qgemm with a requantizing epilogue.

A rule folds into a qgemm only when that qgemm has no other user. Weights are packed here, once, for
the micro-kernel the target's CPU has; weights whose zero point moves them out of int8 stay as they
were. PassContext.config["int8_ops.kernel"] forces a micro-kernel the target has (avx2_split where avx2 would
be chosen, to compare them).

By default the pass rewrites only for a CPU with AVX-512 VNNI. On AVX2 alone the integer path is slower
than the float one end to end (measured, 2 threads, AMD EPYC, ORT-quantized QDQ files: resnet18 43.0 vs
24.5 ms, mobilenet_v2 21.7 vs 18.8 ms): vpmaddubsw's saturation forces the split kernel on full-range
weights, and im2col, the NHWC transposes and the float ops between QDQ pairs cost more than the GEMM
saves. `int8_ops.avx2=True` turns the AVX2 kernels on.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

import numpy as np

from kiln.errors import KilnError
from kiln.ir.expr import Call, Constant, Expr, Function, children, is_absent
from kiln.ir.module import IRModule
from kiln.ir.types import TensorType
from kiln.ir.visitor import post_order, rewrite
from kiln.op.nn import Window
from kiln.op.qgemm import KERNELS, QGemmAttrs, pack_weight, pairs_fit_s16, unpack_weight
from kiln.op.registry import OpDef, get_op
from kiln.target import Target
from kiln.transform.infra import PassContext, function_pass

MAX_DEPTH = 2**31 // (255 * 256)  # |a - a_zp| * |w| summed over K stays inside int32
_ACTS = ("uint8", "int8")


@dataclass(frozen=True)
class QGemm:
    """A qgemm under construction: its inputs as numpy values (weights unpacked) and its attributes."""

    a: Expr
    w: np.ndarray  # [K, N] int8
    a_zp: Expr
    a_scale: Expr
    col_scale: np.ndarray  # [N] float32
    col_bias: np.ndarray  # [N] float32
    out_dtype: str
    y_zero_point: int = 0
    relu: bool = False
    perm: tuple[int, ...] | None = None  # the output's transpose (a convolution's NHWC -> NCHW)

    @property
    def channel_from_end(self) -> int:
        """Where a per-column constant keeps its columns: last axis, or the channel axis after `perm`."""
        return 1 if self.perm is None else len(self.perm) - self.perm.index(len(self.perm) - 1)

    def call(self, kernel: str) -> Expr:
        k, n = self.w.shape
        wsum = self.w.astype(np.int32).sum(0, dtype=np.int32)
        y = get_op("quant.qgemm")(
            self.a, Constant(pack_weight(self.w, KERNELS[kernel][0])), Constant(wsum), self.a_zp, self.a_scale,
            Constant(self.col_scale.astype(np.float32)), Constant(self.col_bias.astype(np.float32)),
            units=n, depth=k, out_dtype=self.out_dtype, y_zero_point=self.y_zero_point, relu=self.relu,
            kernel=kernel)
        return y if self.perm is None else get_op("tensor.transpose")(y, perm=self.perm)

    @staticmethod
    def of(e: Expr) -> QGemm:
        """The QGemm of a qgemm call, or of a transpose of one."""
        perm = e.attrs.perm if _is(e, "tensor.transpose") else None
        call = e.args[0] if perm is not None else e
        at: QGemmAttrs = call.attrs
        a, w, _, a_zp, a_scale, col_scale, col_bias = call.args
        return QGemm(a, unpack_weight(w.data, at.depth, at.units), a_zp, a_scale, col_scale.data, col_bias.data,
                     at.out_dtype, at.y_zero_point, at.relu, perm)


# micro-kernel -> the ISA features its code needs
KERNEL_FEATURES = {"vnni": frozenset({"avx512_vnni", "avx512bw", "avx512f"}), "avx2": frozenset({"avx2"}),
                   "avx2_split": frozenset({"avx2"})}


def choose_kernel(w: np.ndarray, target: Target, forced: str | None, avx2: bool = False) -> str | None:
    """The micro-kernel for these weights on `target` (None: the CPU has no int8 dot product Kiln uses, or
    only AVX2's and `avx2` is off: see the module doc)."""
    if forced is not None:
        return forced
    if KERNEL_FEATURES["vnni"] <= target.features:
        return "vnni"
    if avx2 and "avx2" in target.features:
        return "avx2" if pairs_fit_s16(w) else "avx2_split"
    return None


def _check_forced(forced: str | None, target: Target) -> None:
    """A forced micro-kernel must exist and run on the target: its code would stop the process otherwise."""
    if forced is None:
        return
    if forced not in KERNEL_FEATURES:
        raise KilnError(f"pass config int8_ops.kernel={forced!r}: not a micro-kernel (one of "
                        f"{', '.join(KERNEL_FEATURES)})")
    missing = sorted(KERNEL_FEATURES[forced] - target.features)
    if missing:
        raise KilnError(f"pass config int8_ops.kernel={forced!r}: the target lacks {', '.join(missing)} "
                        f"(target: {target})")


def _is(e: Expr, name: str) -> bool:
    return isinstance(e, Call) and isinstance(e.op, OpDef) and e.op.name == name


def _const(e: Expr | None) -> np.ndarray | None:
    return e.data if isinstance(e, Constant) else None


def _folded(e: Expr) -> np.ndarray | None:
    """A constant, or an operator of constants (a bias's DequantizeLinear) evaluated by its reference."""
    if isinstance(e, Constant):
        return e.data
    if isinstance(e, Call) and isinstance(e.op, OpDef) and all(isinstance(x, Constant) for x in e.args):
        return np.asarray(e.op.reference(e.attrs, *(x.data for x in e.args)))
    return None


def _scalar(e: Expr | None, default: float | None = None) -> float | None:
    """The one value of a constant (absent: `default`)."""
    if e is None or is_absent(e):
        return default
    v = _const(e)
    return float(v.reshape(-1)[0]) if v is not None and v.size == 1 else None


def _per_column(v: np.ndarray | None, n: int, from_end: int = 1) -> np.ndarray | None:
    """A constant that is one value or one per column ([N], [1, N]; [N, 1, 1] for a convolution's channels,
    `from_end` = 3) as an [N] float32 vector."""
    if v is None or v.size not in (1, n) or (v.size == n and (v.ndim < from_end or v.shape[-from_end] != n)):
        return None
    return np.broadcast_to(v.reshape(-1).astype(np.float32), (n,)).copy()


def _activation(e: Expr) -> tuple[Expr, Expr, Expr] | None:
    """(x, x_zero_point, x_scale) of DequantizeLinear(x) with constant per-tensor parameters."""
    if not _is(e, "quant.dequantize_linear"):
        return None
    x, scale, *zp = e.args
    zero, s = _scalar(zp[0] if zp else None, 0.0), _scalar(scale)
    if not (isinstance(x.type, TensorType) and x.type.dtype in _ACTS) or zero is None or s is None:
        return None
    return x, Constant(np.asarray(int(zero), x.type.dtype)), Constant(np.float32(s))


def _dequantized_const(e: Expr, ndim: int, channel_axis: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(W, scale, zero point) of DequantizeLinear(constant W of rank `ndim`), per tensor or per channel
    along `channel_axis`; None for any other expression."""
    if not _is(e, "quant.dequantize_linear") or e.attrs.block_size:
        return None
    w, scale = _const(e.args[0]), _const(e.args[1])
    zp = _const(e.args[2]) if len(e.args) > 2 and not is_absent(e.args[2]) else np.zeros(1, np.int64)
    if w is None or scale is None or zp is None or w.ndim != ndim or w.dtype.name not in _ACTS:
        return None
    if scale.size != 1 and (scale.size != w.shape[channel_axis] or e.attrs.axis % ndim != channel_axis):
        return None
    return w, scale, zp


def _as_int8(shifted: np.ndarray, scale: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(shifted W as int8, scale per channel), None when the zero point moved W out of int8."""
    if shifted.min(initial=0) < -128 or shifted.max(initial=0) > 127:
        return None
    return shifted.astype(np.int8), np.broadcast_to(scale.reshape(-1).astype(np.float32), (n,)).copy()


def _weight(e: Expr, column_axis: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(W - zero point as int8, scale per column) of DequantizeLinear(constant 2-D W)."""
    found = _dequantized_const(e, 2, column_axis)
    if found is None:
        return None
    w, scale, zp = found
    n = w.shape[column_axis]
    shape = (1, n) if column_axis == 1 else (n, 1)
    shifted = w.astype(np.int32) - (zp.reshape(shape) if zp.size > 1 else zp.reshape(()).astype(np.int32))
    return _as_int8(shifted if column_axis == 1 else shifted.T, scale, n)


def _product(a: Expr, w: tuple[np.ndarray, np.ndarray] | None) -> QGemm | None:
    act = _activation(a)
    if act is None or w is None or w[0].shape[0] > MAX_DEPTH:
        return None
    x, zp, scale = act
    n = w[0].shape[1]
    return QGemm(x, w[0], zp, scale, w[1], np.zeros(n, np.float32), "float32")


def _mat_mul(call: Call, grow: QGemm | None) -> QGemm | None:
    return _product(call.args[0], _weight(call.args[1], 1))


def _gemm(call: Call, grow: QGemm | None) -> QGemm | None:
    at = call.attrs
    if at.transA:
        return None
    q = _product(call.args[0], _weight(call.args[1], 0 if at.transB else 1))
    if q is None:
        return None
    q = replace(q, col_scale=q.col_scale * np.float32(at.alpha))
    c = call.args[2] if len(call.args) > 2 and not is_absent(call.args[2]) else None
    if c is None:
        return q
    bias = _per_column(_folded(c), q.w.shape[1])
    return None if bias is None else replace(q, col_bias=bias * np.float32(at.beta))


def _im2col_gemm(call: Call, act: tuple[Expr, Expr, Expr] | None, w: tuple[np.ndarray, np.ndarray] | None,
                 bias: np.ndarray | None) -> QGemm | None:
    """A 2-D, ungrouped convolution: im2col of x (padded with its zero point) times W as [kh*kw*C, Co]."""
    at = call.attrs
    xt = act[0].type if act is not None else None
    if (w is None or bias is None or at.group != 1 or not isinstance(xt, TensorType) or xt.shape is None
            or len(xt.shape) != 4 or not all(isinstance(d, int) for d in xt.shape)):
        return None
    wm, scale = w
    co, c, kh, kw = wm.shape
    win = Window.of(at, (kh, kw))
    _, pads, extra = win.layout(tuple(xt.shape[2:]))
    if any(extra) or kh * kw * c > MAX_DEPTH:
        return None
    nhwc = get_op("tensor.transpose")(act[0], perm=(0, 2, 3, 1))
    cols = get_op("quant.im2col")(nhwc, act[1], kernel=(kh, kw), strides=win.strides, dilations=win.dilations,
                                  pads=(pads[0][0], pads[1][0], pads[0][1], pads[1][1]))
    gemm_w = wm.transpose(2, 3, 1, 0).reshape(kh * kw * c, co)
    return QGemm(cols, gemm_w, act[1], act[2], scale, bias, "float32", perm=(0, 3, 1, 2))


def _conv(call: Call, grow: QGemm | None) -> QGemm | None:
    w = _weight_4d(call.args[1])
    if w is None:
        return None
    has_bias = len(call.args) > 2 and not is_absent(call.args[2])
    bias = _per_column(_folded(call.args[2]), w[0].shape[0]) if has_bias else np.zeros(w[0].shape[0], np.float32)
    return _im2col_gemm(call, _activation(call.args[0]), w, bias)


def _qlinear_conv(call: Call, grow: QGemm | None) -> QGemm | None:
    x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp, *b = call.args
    sx, zx, sy, zy = _scalar(x_s), _scalar(x_zp), _scalar(y_s), _scalar(y_zp)
    if None in (sx, zx, sy, zy):
        return None
    wq = _weight_4d(get_op("quant.dequantize_linear")(w, w_s, w_zp, axis=0))
    if wq is None:
        return None
    co = wq[0].shape[0]
    bias = _per_column(_folded(b[0]), co) if b and not is_absent(b[0]) else np.zeros(co, np.float32)
    act = (x, Constant(np.asarray(int(zx), x.type.dtype)), Constant(np.float32(sx)))
    q = _im2col_gemm(call, act, (wq[0], wq[1] / np.float32(sy)), None if bias is None else bias * sx * wq[1] / sy)
    return None if q is None else replace(q, out_dtype=call.type.dtype, y_zero_point=int(zy))


def _weight_4d(e: Expr) -> tuple[np.ndarray, np.ndarray] | None:
    """(W - zero point as int8 [Co, C, kh, kw], scale per output channel) of DequantizeLinear(constant W)."""
    found = _dequantized_const(e, 4, 0)
    if found is None:
        return None
    w, scale, zp = found
    shifted = w.astype(np.int32) - (zp.reshape(-1, 1, 1, 1).astype(np.int32) if zp.size > 1 else int(zp.reshape(-1)[0]))
    return _as_int8(shifted, scale, w.shape[0])


def _mat_mul_integer(call: Call, grow: QGemm | None) -> QGemm | None:
    a, b, *zps = call.args
    w = _const(b)
    a_zp = zps[0] if zps and not is_absent(zps[0]) else None
    b_zp = _const(zps[1]) if len(zps) > 1 and not is_absent(zps[1]) else np.zeros(1, np.int64)
    at = a.type
    if (w is None or w.ndim != 2 or b_zp is None or b_zp.size not in (1, w.shape[1]) or w.shape[0] > MAX_DEPTH
            or not isinstance(at, TensorType) or at.dtype not in _ACTS or at.shape is None or len(at.shape) < 2):
        return None
    if a_zp is not None and not (isinstance(a_zp.type, TensorType) and a_zp.type.shape in ((), (1,))):
        return None
    shifted = w.astype(np.int32) - b_zp.reshape(1, -1).astype(np.int32)
    if shifted.min(initial=0) < -128 or shifted.max(initial=0) > 127:
        return None
    n = w.shape[1]
    return QGemm(a, shifted.astype(np.int8), a_zp if a_zp is not None else Constant(np.asarray(0, at.dtype)),
                 Constant(np.float32(1)), np.ones(n, np.float32), np.zeros(n, np.float32), "int32")


def _qlinear_matmul(call: Call, grow: QGemm | None) -> QGemm | None:
    a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp = call.args
    w, bs, bz = _const(b), _const(b_s), _const(b_zp)
    sa, za, sy, zy = _scalar(a_s), _scalar(a_zp), _scalar(y_s), _scalar(y_zp)
    if w is None or w.ndim != 2 or None in (bs, bz, sa, za, sy, zy) or w.shape[0] > MAX_DEPTH:
        return None
    n = w.shape[1]
    shifted = w.astype(np.int32) - bz.reshape(1, -1).astype(np.int32)
    scale = _per_column(bs, n)
    if scale is None or shifted.min(initial=0) < -128 or shifted.max(initial=0) > 127:
        return None
    return QGemm(a, shifted.astype(np.int8), Constant(np.asarray(int(za), a.type.dtype)), Constant(np.float32(sa)),
                 scale / np.float32(sy), np.zeros(n, np.float32), call.type.dtype, int(zy))


def _cast(call: Call, grow: QGemm | None) -> QGemm | None:
    if grow is None or grow.out_dtype != "int32" or call.attrs.to != "float32":
        return None
    return replace(grow, out_dtype="float32")


def _add(call: Call, grow: QGemm | None) -> QGemm | None:
    if grow is None or grow.out_dtype != "float32" or grow.relu:
        return None
    other = call.args[1] if _grown(call.args[0]) else call.args[0]
    bias = _per_column(_folded(other), grow.w.shape[1], grow.channel_from_end)
    return None if bias is None else replace(grow, col_bias=grow.col_bias + bias)


def _mul(call: Call, grow: QGemm | None) -> QGemm | None:
    if grow is None or grow.out_dtype != "float32" or grow.relu:
        return None
    other = call.args[1] if _grown(call.args[0]) else call.args[0]
    n = grow.w.shape[1]
    scale = _per_column(_const(other), n, grow.channel_from_end)
    if scale is not None:
        return replace(grow, col_scale=grow.col_scale * scale, col_bias=grow.col_bias * scale)
    t = other.type
    runtime_scalar = isinstance(t, TensorType) and t.dtype == "float32" and t.shape in ((), (1,))
    if runtime_scalar and _scalar(grow.a_scale) == 1.0 and not grow.col_bias.any():
        return replace(grow, a_scale=other)
    return None


def _relu(call: Call, grow: QGemm | None) -> QGemm | None:
    if grow is None or grow.out_dtype != "float32":
        return None
    return replace(grow, relu=True)


def _quantize(call: Call, grow: QGemm | None) -> QGemm | None:
    x, y_s, *zp = call.args
    sy, zy = _scalar(y_s), _scalar(zp[0] if zp else None, 0.0)
    out = call.type.dtype
    if grow is None or grow.out_dtype != "float32" or sy is None or zy is None or out not in _ACTS:
        return None
    return replace(grow, col_scale=grow.col_scale / np.float32(sy), col_bias=grow.col_bias / np.float32(sy),
                   out_dtype=out, y_zero_point=int(zy))


def _grown(e: Expr) -> bool:
    """A qgemm, or a qgemm's output transpose (a convolution's), that a rule may fold into."""
    return _is(e, "quant.qgemm") or (_is(e, "tensor.transpose") and _is(e.args[0], "quant.qgemm"))


# op name -> (the argument positions a qgemm may be grown from, the rule)
RULES = {
    "nn.conv": ((), _conv),
    "quant.qlinear_conv": ((), _qlinear_conv),
    "linalg.mat_mul": ((), _mat_mul),
    "linalg.gemm": ((), _gemm),
    "linalg.mat_mul_integer": ((), _mat_mul_integer),
    "quant.qlinear_matmul": ((), _qlinear_matmul),
    "math.cast": ((0,), _cast),
    "math.add": ((0, 1), _add),
    "math.mul": ((0, 1), _mul),
    "nn.relu": ((0,), _relu),
    "quant.quantize_linear": ((0,), _quantize),
}


@function_pass("int8-ops", opt_level=2, config=("int8_ops.kernel", "int8_ops.avx2"))
def int8_ops(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
    """Quantized matmul/gemm patterns -> quant.qgemm on the target's int8 micro-kernel."""
    forced = ctx.config.get("int8_ops.kernel")
    avx2 = bool(ctx.config.get("int8_ops.avx2", False))
    _check_forced(forced, ctx.target)
    if forced is None and choose_kernel(np.zeros((1, 1), np.int8), ctx.target, None, avx2) is None:
        return fn
    uses = Counter(id(c) for e in post_order(fn.body) for c in children(e))

    def post(old: Expr, new: Expr) -> Expr:
        if not (isinstance(new, Call) and isinstance(new.op, OpDef) and new.op.name in RULES):
            return new
        slots, rule = RULES[new.op.name]
        grown = [k for k in slots if _grown(new.args[k]) and uses[id(old.args[k])] == 1]
        if slots and not grown:
            return new
        q = rule(new, QGemm.of(new.args[grown[0]]) if grown else None)
        if q is None:
            return new
        return q.call(choose_kernel(q.w, ctx.target, forced, avx2))  # type: ignore[arg-type]

    return rewrite(fn, post)
