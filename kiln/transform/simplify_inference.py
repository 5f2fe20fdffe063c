"""SimplifyInference: training-time operators in their inference form, and decomposed blocks
recognised as the operators they spell.

BatchNormalization becomes a per-channel x * scale + shift (which FoldScaleAxis can push into a
conv), Dropout disappears, and LayerNorm / GELU / softmax attention written out in elementwise ops
become nn.layer_normalization / nn.gelu / nn.attention. Instance and group normalization stay.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from kiln.ir import dtype as dt
from kiln.ir.expr import Call, Constant, Expr, Function, TupleGetItem, is_absent
from kiln.ir.module import IRModule
from kiln.ir.sizes import fits
from kiln.ir.types import ANY, TensorType
from kiln.op.reduce import reduced_axes
from kiln.op.registry import get_op
from kiln.transform.infra import PassContext, function_pass
from kiln.transform.pattern import (
    Match,
    Rule,
    apply_rules,
    int_list,
    is_constant,
    is_op,
    is_tuple_get_item,
    optional,
    wildcard,
)
from kiln.transform.simplify_expr import SIMPLIFY_EXPR_RULES, reshape_to, shape_of

X = wildcard().named("x")


def scalar(value: float | None = None, rtol: float | None = None):
    """A one-element constant (close to `value` when given): broadcasting it never grows a shape."""
    return is_constant(value, rtol).where(lambda e: e.data.size == 1)


def _float(e: Expr) -> float:
    return float(np.asarray(e.data, dtype=np.float64).reshape(-1)[0])


def _const(value: np.ndarray, dtype: str) -> Constant:
    return Constant(np.asarray(value, dtype=np.float64).astype(dt.to_numpy(dtype)))


# ---------------------------------------------------------------------------------------------
# batch normalization and dropout


def _batch_norm(m: Match) -> Expr | None:
    """y = x * (scale / sqrt(var + eps)) + (B - mean * scale / sqrt(var + eps)), per channel (axis 1)."""
    bn = m.root
    x, scale, b, mean, var = bn.args
    xt = x.type
    if bn.attrs.training_mode or xt.ndim is None:
        return None
    per_channel = (-1,) + (1,) * (xt.ndim - 2)
    params = (scale, b, mean, var)
    mul, add = get_op("math.mul"), get_op("math.add")
    if all(isinstance(p, Constant) for p in params):
        s, bias, mu, v = (p.data.astype(np.float64) for p in params)
        inv = s / np.sqrt(v + bn.attrs.epsilon)
        k = _const(inv.reshape(per_channel), xt.dtype)
        c = _const((bias - mu * inv).reshape(per_channel), xt.dtype)
        return add(mul(x, k), c)
    if any(p.type.dtype != xt.dtype for p in params):
        return None
    eps = _const(np.array(bn.attrs.epsilon), xt.dtype)
    inv = get_op("math.div")(scale, get_op("math.sqrt")(add(var, eps)))
    shift = get_op("math.sub")(b, mul(mean, inv))
    if xt.ndim > 2:
        inv, shift = reshape_to(inv, per_channel), reshape_to(shift, per_channel)
    return add(mul(x, inv), shift)


def _dropout_inference(m: Match) -> bool:
    """Not training (mode omitted or false), or nothing is dropped (ratio 0)."""
    mode, ratio = m.get("mode"), m.get("ratio")
    if mode is None or is_absent(mode):
        return True
    if isinstance(mode, Constant) and not bool(mode.data.reshape(-1)[0]):
        return True
    return isinstance(ratio, Constant) and float(ratio.data.reshape(-1)[0]) == 0.0


def _dropout_output(m: Match) -> Expr | None:
    return m["x"] if _dropout_inference(m) else None


def _dropout_mask(m: Match) -> Expr | None:
    """The mask is all true; spelled as a fill of x's (static) shape."""
    shape = shape_of(m["x"])
    if not _dropout_inference(m) or shape is None or not all(isinstance(d, int) for d in shape):
        return None
    dims = Constant(np.array(shape, dtype=np.int64))
    return get_op("tensor.constant_of_shape")(dims, value=np.array([True]))


_DROPOUT = is_op("nn.dropout")(X, optional(wildcard().named("ratio")), optional(wildcard().named("mode")))


# ---------------------------------------------------------------------------------------------
# layer normalization: ((x - mean) / sqrt(mean((x - mean)^2) + eps)) [* gamma] [+ beta]

_MEAN = is_op("reduce.mean")(X, optional(wildcard().named("axes1"))).named("mean1")
_CENTERED = is_op("math.sub")(X, _MEAN).named("d")
_SQUARE = is_op("math.pow")(_CENTERED, scalar(2.0)) | is_op("math.mul")(_CENTERED, _CENTERED)
_VAR = is_op("reduce.mean")(_SQUARE, optional(wildcard().named("axes2"))).named("var")
_STD = is_op("math.sqrt")(is_op("math.add")(_VAR, scalar().named("eps")))
_NORMALIZED = is_op("math.div")(_CENTERED, _STD) | is_op("math.mul")(_CENTERED, is_op("math.reciprocal")(_STD))


def _trailing_axis(m: Match) -> int | None:
    """The first normalized axis, when both means reduce the same trailing axes keeping dims."""
    rank = m["x"].type.ndim
    if rank is None or rank == 0:
        return None
    found = []
    for mean, axes in ((m["mean1"], m.get("axes1")), (m["var"], m.get("axes2"))):
        if not mean.attrs.keepdims:
            return None
        vals = None if axes is None or is_absent(axes) else int_list(axes)
        if vals is None and axes is not None and not is_absent(axes):
            return None
        red = reduced_axes(mean.attrs, rank, None if vals is None else np.array(vals, np.int64))
        if not red or red != tuple(range(red[0], rank)):
            return None
        found.append(red[0])
    return found[0] if found[0] == found[1] else None


def _layer_norm(m: Match) -> Expr | None:
    x = m["x"]
    axis = _trailing_axis(m)
    if axis is None or x.type.dtype not in dt.FLOATS or m["d"].type != x.type:
        return None
    stash = "float64" if x.type.dtype == "float64" else "float32"
    ones = _const(np.ones((1,)), x.type.dtype)
    ln = get_op("nn.layer_normalization")(x, ones, axis=axis, epsilon=_float(m["eps"]), stash_type=stash)
    return TupleGetItem(ln, 0)


_LN_OUT = is_tuple_get_item(is_op("nn.layer_normalization").named("ln"), 0).named("y")


def _sole_use(m: Match) -> bool:
    return m.uses(m["y"]) == 1 and m.uses(m["ln"]) == 1


def _ln_scale(m: Match) -> Expr | None:
    """Absorb `* gamma` into a layer norm whose scale is still ones (and has no bias yet)."""
    ln = m["ln"]
    if len(ln.args) != 2 or not isinstance(ln.args[1], Constant) or not np.all(ln.args[1].data == 1):
        return None
    if not _sole_use(m) or ln.args[1].data.shape != (1,):
        return None
    return TupleGetItem(get_op("nn.layer_normalization")(ln.args[0], m["p"], attrs=ln.attrs), 0)


def _ln_bias(m: Match) -> Expr | None:
    ln = m["ln"]
    if len(ln.args) != 2 or not _sole_use(m):
        return None
    return TupleGetItem(get_op("nn.layer_normalization")(ln.args[0], ln.args[1], m["p"], attrs=ln.attrs), 0)


# ---------------------------------------------------------------------------------------------
# GELU: 0.5 * x * (1 + erf(x / sqrt(2)))  and  0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))

_ERF_CORE = is_op("math.add")(is_op("math.erf")(
    is_op("math.div")(X, scalar(math.sqrt(2))) | is_op("math.mul")(X, scalar(1 / math.sqrt(2)))), scalar(1.0))
_CUBE = (is_op("math.pow")(X, scalar(3.0)) | is_op("math.mul")(is_op("math.mul")(X, X), X))
_TANH_CORE = is_op("math.add")(is_op("math.tanh")(is_op("math.mul")(
    is_op("math.add")(X, is_op("math.mul")(_CUBE, scalar(0.044715))), scalar(math.sqrt(2 / math.pi)))), scalar(1.0))


def _half_x_times(core):
    """0.5 * x * core, in the associations exporters produce."""
    half, mul = scalar(0.5), is_op("math.mul")
    return (mul(mul(X, core), half) | mul(mul(X, half), core) | mul(X, mul(core, half))
            | is_op("math.div")(mul(X, core), scalar(2.0)))


def _gelu(approximate: str):
    def rewrite(m: Match) -> Expr | None:
        if m["x"].type.dtype not in dt.FLOATS:
            return None
        return get_op("nn.gelu")(m["x"], approximate=approximate)
    return rewrite


# ---------------------------------------------------------------------------------------------
# attention: softmax(q k^T * scale [+ mask | masked by where(keep, ., -big)]) v  over (B, H, S, D) tensors

_SCORES = is_op("linalg.mat_mul")(
    is_op("math.mul")(wildcard().named("q"), scalar().named("q_scale")) | wildcard().named("q"),
    wildcard().named("kt")).named("scores")
_SCALED = (is_op("math.mul")(_SCORES, scalar().named("mul_scale"))
           | is_op("math.div")(_SCORES, scalar().named("div_scale")) | _SCORES)
_WHERE_MASKED = is_op("math.where")(is_constant().named("keep"), _SCALED, scalar().named("fill"))
_LOGITS = is_op("math.add")(_SCALED, wildcard().named("mask")).named("logits") | _WHERE_MASKED | _SCALED
MASKED_BELOW = -1e4  # a where-fill at or below this gets probability exp(fill - max) == 0, as an added mask does
_ATTENTION = is_op("linalg.mat_mul")(is_op("reduce.softmax")(_LOGITS).named("probs"), wildcard().named("v"))


def _heads_match(*xs: Expr) -> bool:
    """Rank-4 tensors of one float dtype sharing known (batch, heads) dims: no broadcasting in matmul."""
    ts = [x.type for x in xs]
    if not all(isinstance(t, TensorType) and t.ndim == 4 and t.dtype in dt.FLOATS for t in ts):
        return False
    lead = ts[0].shape[:2]
    return ANY not in lead and all(t.shape[:2] == lead and t.dtype == ts[0].dtype for t in ts)


def _attention(m: Match) -> Expr | None:
    q, kt, v, probs = m["q"], m["kt"], m["v"], m["probs"]
    if probs.attrs.axis not in (-1, 3):
        return None
    k = kt.args[0] if _is_last_swap(kt) else get_op("tensor.transpose")(kt, perm=(0, 1, 3, 2))
    if not _heads_match(q, k, v):
        return None
    scale = 1.0
    for name in ("q_scale", "mul_scale"):
        if name in m:
            scale *= _float(m[name])
    if "div_scale" in m:
        scale /= _float(m["div_scale"])
    if not scale > 0 or not math.isfinite(scale):
        return None
    args = [q, k, v]
    causal = 0
    if "keep" in m:
        mask = _where_mask(m["keep"].data, _float(m["fill"]), m["scores"].type, q.type.dtype)
        if mask is None:
            return None
        if isinstance(mask, str):
            causal = 1
        else:
            args.append(Constant(mask))
    elif "mask" in m:
        mask, scores = m["mask"], m["scores"].type.shape
        ms = shape_of(mask)
        if mask.type.dtype != q.type.dtype or ms is None or not 1 <= len(ms) <= 4:
            return None
        if ms[-1] != scores[-1] or ms[-1] == ANY:  # nn.attention pads a short mask; never broadcasts it
            return None
        if not all(d == 1 or (d == s and d != ANY) for d, s in zip(ms[::-1], scores[::-1])):
            return None
        if isinstance(mask, Constant) and _additive_causal(mask.data, scores):
            causal = 1
        else:
            args.append(mask)
    return TupleGetItem(get_op("nn.attention")(*args, scale=scale, is_causal=causal), 0)


def _where_mask(keep: np.ndarray, fill: float, scores: TensorType, dtype: str) -> np.ndarray | str | None:
    """where(keep, scores, fill) as nn.attention sees it: "causal" when keep is the lower triangle of
    square scores, else the additive mask (0 where kept, fill elsewhere); None when it is no mask (a
    fill that leaves probability, a shape the mask cannot take)."""
    shape = scores.shape
    if not fill <= MASKED_BELOW or keep.dtype != np.bool_ or not 1 <= keep.ndim <= 4 or shape is None:
        return None
    if not all(isinstance(d, int) for d in shape[-2:]):
        return None
    if keep.shape[-1] != shape[-1] or not all(d == 1 or d == s for d, s in zip(keep.shape[::-1], shape[::-1])):
        return None
    if keep.ndim >= 2 and shape[-1] == shape[-2] and fits(shape[-2:], np.bool_):  # a [1, S] mask: tril is S x S
        kept = np.broadcast_to(keep, keep.shape[:-2] + tuple(shape[-2:]))
        tril = np.tril(np.ones(shape[-2:], bool))
        if all(np.array_equal(kept[i], tril) for i in np.ndindex(kept.shape[:-2])):
            return "causal"
    return np.where(keep, np.float32(0), np.float32(fill)).astype(dt.to_numpy(dtype))


def _additive_causal(mask: np.ndarray, scores: tuple) -> bool:
    """Whether adding `mask` to square scores is causal masking: 0 on and below the diagonal, at or
    below MASKED_BELOW above it, the same for every leading index (PyTorch exports
    scaled_dot_product_attention(is_causal=True) so, with -inf)."""
    s = scores[-1]
    if mask.ndim < 2 or scores[-2] != s or mask.shape[-2:] != (s, s):
        return False
    tril = np.tril(np.ones((s, s), bool))
    rows = mask.reshape(-1, s, s)
    return bool(np.all(rows[:, tril] == 0) and np.all(rows[:, ~tril] <= MASKED_BELOW))


def _is_last_swap(e: Expr) -> bool:
    return (isinstance(e, Call) and getattr(e.op, "name", "") == "tensor.transpose"
            and e.attrs.perm is not None and tuple(e.attrs.perm) == (0, 1, 3, 2))


_TUPLE_ITEM_RULE = next(r for r in SIMPLIFY_EXPR_RULES if r.name == "tuple-get-item-of-tuple")

SIMPLIFY_INFERENCE_RULES: list[Rule] = [
    Rule("batch-norm-inference", is_op("nn.batch_normalization"), _batch_norm),
    Rule("dropout-output", is_tuple_get_item(_DROPOUT, 0), _dropout_output),
    Rule("dropout-mask", is_tuple_get_item(_DROPOUT, 1), _dropout_mask),
    Rule("layer-norm", _NORMALIZED, _layer_norm),
    Rule("layer-norm-scale", is_op("math.mul")(_LN_OUT, wildcard().named("p")), _ln_scale),
    Rule("layer-norm-bias", is_op("math.add")(_LN_OUT, wildcard().named("p")), _ln_bias),
    Rule("gelu-erf", _half_x_times(_ERF_CORE), _gelu("none")),
    Rule("gelu-tanh", _half_x_times(_TANH_CORE), _gelu("tanh")),
    Rule("softmax-attention", _ATTENTION, _attention),
    _TUPLE_ITEM_RULE,
]


def simplify_inference_fn(fn: Function, stats: Counter | None = None) -> Function:
    return apply_rules(fn, SIMPLIFY_INFERENCE_RULES, stats)


@function_pass("simplify-inference", opt_level=0)
def simplify_inference(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
    """Inference forms of batch norm / dropout; recognise layer norm, GELU and attention."""
    return simplify_inference_fn(fn)
