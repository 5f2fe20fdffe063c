"""FoldScaleAxis: a constant per-channel scale (and shift) next to a conv / dense / matmul / gemm
is folded into its constant weights (and bias), so the kernel does the work for free.

Forward: op(x, W, b) * s + t == op(x, W * s, b * s + t) when s, t vary only along the output
channel. Backward: conv(x * s, W) == conv(x, W * s) when s varies only along the input channel
(zero padding commutes with scaling); likewise matmul(x * s, W) along x's last axis. Only float
tensors with constant weights; an op with other consumers is never duplicated.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from kiln.ir import dtype as dt
from kiln.ir.expr import Call, Constant, Expr, Function, is_absent
from kiln.ir.module import IRModule
from kiln.ir.types import TensorType
from kiln.transform.infra import PassContext, function_pass
from kiln.transform.pattern import Match, Rule, apply_rules, is_constant, is_op, optional, wildcard

W = is_constant().named("w")
B = optional(wildcard().named("b"))  # a bias: omitted, or checked to be constant by the rule
S = is_constant().named("s")


def channel_vector(s: np.ndarray, out: TensorType, axis: int) -> np.ndarray | None:
    """s as a float64 vector along `axis` of `out`, when broadcasting s into `out` varies only
    along that axis and leaves `out`'s shape unchanged; else None."""
    rank = out.ndim
    if rank is None or s.ndim > rank or not 0 <= axis < rank:
        return None
    c = out.shape[axis]
    shape = (1,) * (rank - s.ndim) + s.shape
    if any(d != 1 for i, d in enumerate(shape) if i != axis):
        return None
    if shape[axis] != 1 and shape[axis] != c:
        return None
    if shape[axis] == 1 and not isinstance(c, int):
        return None
    vec = s.astype(np.float64).reshape(-1)
    return np.broadcast_to(vec, (c,)).copy()


def _const(a: np.ndarray, like: Expr) -> Constant:
    return Constant(a.astype(dt.to_numpy(like.type.dtype)))


def _bias(call: Call, index: int) -> tuple[bool, np.ndarray | None]:
    """(usable, value) of an optional bias input: usable when omitted or a constant."""
    if index >= len(call.args) or is_absent(call.args[index]):
        return True, None
    b = call.args[index]
    return (True, b.data.astype(np.float64)) if isinstance(b, Constant) else (False, None)


def _foldable(m: Match, name: str) -> Call | None:
    """The matched producer when it is float, used only here, and has constant weights."""
    op = m[name]
    if m.uses(op) != 1 or op.type.dtype not in dt.FLOATS:
        return None
    return op


def _rebuild(call: Call, args: list[Expr]) -> Call:
    return Call(call.op, tuple(args), call.attrs, call.name)


# ---------------------------------------------------------------------------------------------
# forward: producer followed by * s or + t


def _conv_mul(m: Match) -> Expr | None:
    conv = _foldable(m, "conv")
    if conv is None:
        return None
    vec = channel_vector(m["s"].data, conv.type, 1)
    ok, b = _bias(conv, 2)
    if vec is None or not ok:
        return None
    w = m["w"].data.astype(np.float64)
    args = [conv.args[0], _const(w * vec.reshape((-1,) + (1,) * (w.ndim - 1)), conv)]
    if b is not None:
        args.append(_const(b * vec, conv))
    return _rebuild(conv, args)


def _conv_add(m: Match) -> Expr | None:
    conv = _foldable(m, "conv")
    if conv is None:
        return None
    vec = channel_vector(m["s"].data, conv.type, 1)
    ok, b = _bias(conv, 2)
    if vec is None or not ok:
        return None
    return _rebuild(conv, [conv.args[0], conv.args[1], _const(vec if b is None else b + vec, conv)])


def _matmul_mul(m: Match) -> Expr | None:
    mm = _foldable(m, "mm")
    w = m["w"].data
    if mm is None or w.ndim != 2:
        return None
    vec = channel_vector(m["s"].data, mm.type, mm.type.ndim - 1)
    if vec is None:
        return None
    return _rebuild(mm, [mm.args[0], _const(w.astype(np.float64) * vec[None, :], mm)])


def _gemm_mul(m: Match) -> Expr | None:
    """alpha A B' s + beta C s: scale B along N and C along its last axis."""
    gemm = _foldable(m, "gemm")
    if gemm is None:
        return None
    vec = channel_vector(m["s"].data, gemm.type, 1)
    ok, c = _bias(gemm, 2)
    if vec is None or not ok:
        return None
    w = m["w"].data.astype(np.float64)
    args = [gemm.args[0], _const(w * (vec[:, None] if gemm.attrs.transB else vec[None, :]), gemm)]
    if c is not None:
        args.append(_const(c * vec, gemm))
    return _rebuild(gemm, args)


def _gemm_add(m: Match) -> Expr | None:
    """alpha A B + beta C + t == alpha A B + 1 * (beta C + t) for any t that broadcasts into (M, N)."""
    gemm = _foldable(m, "gemm")
    if gemm is None:
        return None
    t, out = m["s"].data, gemm.type.shape
    ok, c = _bias(gemm, 2)
    if not ok or t.ndim > 2 or any(d != 1 and d != o for d, o in zip(t.shape[::-1], out[::-1])):
        return None
    bias = t.astype(np.float64) if c is None else gemm.attrs.beta * c + t.astype(np.float64)
    attrs = type(gemm.attrs)(gemm.attrs.alpha, 1.0, gemm.attrs.transA, gemm.attrs.transB)
    return Call(gemm.op, (gemm.args[0], gemm.args[1], _const(bias, gemm)), attrs, gemm.name)


# ---------------------------------------------------------------------------------------------
# backward: * s before the producer


def _conv_input_scale(m: Match) -> Expr | None:
    """conv(x * s, W): input channel c = g * (Ci / group) + j scales W[o, j] for o in group g."""
    conv, x = m.root, m["x"]
    if conv.type.dtype not in dt.FLOATS or m["scaled"].type != x.type:
        return None
    vec = channel_vector(m["s"].data, x.type, 1)
    if vec is None:
        return None
    w = m["w"].data.astype(np.float64)
    groups, per_in = conv.attrs.group, w.shape[1]
    per_out = w.shape[0] // groups
    idx = (np.arange(w.shape[0])[:, None] // per_out) * per_in + np.arange(per_in)[None, :]
    w = w * vec[idx].reshape(idx.shape + (1,) * (w.ndim - 2))
    return _rebuild(conv, [x, _const(w, conv)] + list(conv.args[2:]))


def _matmul_input_scale(m: Match) -> Expr | None:
    mm, x, w = m.root, m["x"], m["w"].data
    if mm.type.dtype not in dt.FLOATS or w.ndim != 2 or m["scaled"].type != x.type or x.type.ndim is None:
        return None
    vec = channel_vector(m["s"].data, x.type, x.type.ndim - 1)
    if vec is None:
        return None
    return _rebuild(mm, [x, _const(w.astype(np.float64) * vec[:, None], mm)])


_CONV = is_op("nn.conv")(wildcard(), W, B).named("conv")
_MATMUL = is_op("linalg.mat_mul")(wildcard(), W).named("mm")
_GEMM = is_op("linalg.gemm")(wildcard(), W, B).named("gemm")
_SCALED_X = is_op("math.mul")(wildcard().named("x"), S).named("scaled")

FOLD_SCALE_AXIS_RULES: list[Rule] = [
    Rule("conv-mul", is_op("math.mul")(_CONV, S), _conv_mul),
    Rule("conv-add", is_op("math.add")(_CONV, S), _conv_add),
    Rule("matmul-mul", is_op("math.mul")(_MATMUL, S), _matmul_mul),
    Rule("gemm-mul", is_op("math.mul")(_GEMM, S), _gemm_mul),
    Rule("gemm-add", is_op("math.add")(_GEMM, S), _gemm_add),
    Rule("conv-input-scale", is_op("nn.conv")(_SCALED_X, W, B), _conv_input_scale),
    Rule("matmul-input-scale", is_op("linalg.mat_mul")(_SCALED_X, W), _matmul_input_scale),
]


def fold_scale_axis_fn(fn: Function, stats: Counter | None = None) -> Function:
    return apply_rules(fn, FOLD_SCALE_AXIS_RULES, stats)


@function_pass("fold-scale-axis", opt_level=3)
def fold_scale_axis(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
    """Fold constant per-channel scales and shifts into the weights of conv / matmul / gemm."""
    return fold_scale_axis_fn(fn)
