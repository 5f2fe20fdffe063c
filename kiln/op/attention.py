"""Attention and transformer-block operators: scaled dot-product Attention (GQA, masks, causal
and sliding windows, KV cache, softcap), FlexAttention (score/prob modifier functions),
RotaryEmbedding and SwiGLU.

References compute in float32 (float64 for float64 inputs) and round outputs to the ONNX
dtypes; the softmax runs in `softmax_precision` when given. A fully masked query row (no key
allowed) yields zeros, never NaN.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kiln.errors import TypeInferenceError
from kiln.ir import dtype as dt
from kiln.ir.types import ANY, Dim, FuncType, TensorType, TupleType
from kiln.op.registry import BROADCAST, INJECTIVE, OPAQUE, define_op
from kiln.op.typerel import check_dtype, tensor

FLOAT_DTYPES = ("bfloat16", "float16", "float32", "float64")
MASK_DTYPES = dt.INTS + FLOAT_DTYPES + ("bool",)


def _opt(types: list, i: int):
    """The i-th input's type, None when omitted (trailing omitted inputs are dropped)."""
    return types[i] if i < len(types) else None


def _div(a: Dim, b: int, what: str) -> Dim:
    if not isinstance(a, int):
        return ANY
    if b <= 0 or a % b:
        raise TypeInferenceError(f"{what}: {a} is not divisible by {b}")
    return a // b


def _mul(a: Dim, b: Dim) -> Dim:
    return a * b if isinstance(a, int) and isinstance(b, int) else ANY


def _add(a: Dim, b: Dim) -> Dim:
    if b == 0:
        return a
    return a + b if isinstance(a, int) and isinstance(b, int) else ANY


def _same(a: Dim, b: Dim, what: str) -> Dim:
    """Unify two dims that must be equal; the most precise one wins (int, then named, then ANY)."""
    if isinstance(a, int) and isinstance(b, int) and a != b:
        raise TypeInferenceError(f"{what}: {a} != {b}")
    if isinstance(b, int) or a == ANY:
        return b
    return a


def _rank(t: TensorType, ranks: tuple[int, ...], what: str) -> None:
    if t.shape is not None and len(t.shape) not in ranks:
        raise TypeInferenceError(f"{what} must have rank {' or '.join(map(str, ranks))}, got shape {t.shape}")


def _wide(dtype: np.dtype) -> type:
    """The dtype references compute in: float64 for float64 inputs, else float32."""
    return np.float64 if dtype == np.float64 else np.float32


def _softmax(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis; an all -inf row gives zeros instead of NaN."""
    peak = np.max(x, axis=-1, keepdims=True)
    e = np.exp(x - np.where(np.isneginf(peak), x.dtype.type(0), peak))
    total = np.sum(e, axis=-1, keepdims=True)
    return e / np.where(total == 0, x.dtype.type(1), total)


def _to_heads(x: np.ndarray, heads: int) -> np.ndarray:
    """(B, S, H*D) -> (B, H, S, D)."""
    b, s, hd = x.shape
    return x.reshape(b, s, heads, hd // heads).transpose(0, 2, 1, 3)


def _expand_kv(k: np.ndarray, q_heads: int) -> np.ndarray:
    """GQA: query head h reads kv head h // (q_heads / kv_heads)."""
    return np.repeat(k, q_heads // k.shape[1], axis=1)


# ---------------------------------------------------------------------------------------------
# Attention


@dataclass(frozen=True)
class AttentionAttrs:
    is_causal: int = 0
    kv_num_heads: int | None = None
    q_num_heads: int | None = None
    qk_matmul_output_mode: int = 0
    scale: float | None = None
    softcap: float = 0.0
    softmax_precision: str | None = None  # a dtype name (ONNX gives a TensorProto code)
    left_window_size: int = -1
    right_window_size: int = -1
    # Kiln's own: how many leading outputs (Y, present_key, present_value, qk) the op produces. ONNX's
    # op has all four; kiln/transform/attention_heads.py trims those nobody reads (no kernel writes them)
    outputs: int = 4


def _qkv_dims(attrs, q: TensorType, k: TensorType, v: TensorType):
    """(B, Hq, Sq, D, Hkv, Skv, Dv) from 4-D inputs, or 3-D inputs and the head-count attrs."""
    rank = next((t.ndim for t in (q, k, v) if t.ndim is not None), 4)
    for t, n in ((q, "Q"), (k, "K"), (v, "V")):
        _rank(t, (rank,), n)
    unk = (ANY,) * rank
    qs, ks, vs = (t.shape if t.shape is not None else unk for t in (q, k, v))
    if rank == 4:
        b, hq, sq, d = qs
        hkv, skv = _same(ks[1], vs[1], "K/V heads"), _same(ks[2], vs[2], "K/V sequence length")
        d, dv = _same(d, ks[3], "Q/K head size"), vs[3]
    else:
        hq, hkv = attrs.q_num_heads, attrs.kv_num_heads
        if hq is None or hkv is None:
            raise TypeInferenceError("3-D Q/K/V need the q_num_heads and kv_num_heads attributes")
        b, sq, skv = qs[0], qs[1], _same(ks[1], vs[1], "K/V sequence length")
        d = _same(_div(qs[2], hq, "Q hidden size / q_num_heads"), _div(ks[2], hkv, "K hidden size / kv_num_heads"),
                  "Q/K head size")
        dv = _div(vs[2], hkv, "V hidden size / kv_num_heads")
    b = _same(_same(b, ks[0], "Q/K batch"), vs[0], "Q/V batch")
    if isinstance(hq, int) and isinstance(hkv, int) and (hkv <= 0 or hq % hkv):
        raise TypeInferenceError(f"q heads ({hq}) must be a multiple of kv heads ({hkv})")
    return rank, b, hq, sq, d, hkv, skv, dv


def _attention_rel(attrs, types, values):
    q, k, v = (tensor(types[i], n) for i, n in enumerate(("Q", "K", "V")))
    for t, n in ((q, "Q"), (v, "V")):
        check_dtype(t, FLOAT_DTYPES, n)
    if k.dtype != q.dtype:
        raise TypeInferenceError(f"K has dtype {k.dtype}; expected {q.dtype} like Q")
    if attrs.qk_matmul_output_mode not in (0, 1, 2, 3):
        raise TypeInferenceError(f"qk_matmul_output_mode must be 0..3, got {attrs.qk_matmul_output_mode}")
    if attrs.left_window_size < -1 or attrs.right_window_size < -1:
        raise TypeInferenceError("left_window_size and right_window_size must be -1 or nonnegative")
    if not 1 <= attrs.outputs <= 4:
        raise TypeInferenceError(f"outputs must be 1..4, got {attrs.outputs}")
    rank, b, hq, sq, d, hkv, skv, dv = _qkv_dims(attrs, q, k, v)
    mask, past_k, past_v, nonpad = (_opt(types, i) for i in range(3, 7))
    if mask is not None:
        check_dtype(mask, MASK_DTYPES, "attn_mask")
        _rank(mask, (1, 2, 3, 4), "attn_mask")
    if (past_k is None) != (past_v is None):
        raise TypeInferenceError("past_key and past_value must be given together")
    if nonpad is not None:
        if past_k is not None:
            raise TypeInferenceError("nonpad_kv_seqlen cannot be combined with past_key/past_value")
        check_dtype(nonpad, ("int64",), "nonpad_kv_seqlen")
    past: Dim = 0
    if past_k is not None:
        for t, n, dtype, size in ((past_k, "past_key", q.dtype, d), (past_v, "past_value", v.dtype, dv)):
            if t.dtype != dtype:
                raise TypeInferenceError(f"{n} has dtype {t.dtype}; expected {dtype}")
            _rank(t, (4,), n)
            if t.shape is not None:
                _same(t.shape[1], hkv, f"{n} heads")
                _same(t.shape[3], size, f"{n} head size")
        past = _same(past_k.shape[2] if past_k.shape else ANY, past_v.shape[2] if past_v.shape else ANY,
                     "past_key/past_value length")
    total = _add(skv, past)
    y = (b, hq, sq, dv) if rank == 4 else (b, sq, _mul(hq, dv))
    outs = (TensorType(y, q.dtype), TensorType((b, hkv, total, d), k.dtype),
            TensorType((b, hkv, total, dv), v.dtype), TensorType((b, hq, sq, total), q.dtype))
    return TupleType(outs[:attrs.outputs])


def _attention_bias(attrs, mask, offset, sq: int, skv: int, nonpad, dtype: type) -> np.ndarray:
    """Additive bias (0 allowed, -inf disallowed, plus a float mask), broadcastable to (B, Hq, Sq, Skv).

    Causal and window bounds are bottom-right aligned: query i sits at key position i + offset."""
    pos = np.arange(sq)[:, None] + offset
    j = np.arange(skv)
    allowed = np.ones(np.broadcast_shapes(np.shape(pos), (skv,)), bool)
    if attrs.is_causal:
        allowed &= j <= pos
    if attrs.left_window_size >= 0:
        allowed &= pos - j <= attrs.left_window_size
    if attrs.right_window_size >= 0:
        allowed &= j - pos <= attrs.right_window_size
    if nonpad is not None:
        allowed = allowed & (j < nonpad.reshape(-1, 1, 1, 1))
    bias = np.where(allowed, dtype(0), dtype(-np.inf))
    if mask is None:
        return bias
    short = skv - mask.shape[-1]  # an external-cache mask may stop before the padded keys
    if mask.dtype == np.bool_:
        mask = np.pad(mask, [(0, 0)] * (mask.ndim - 1) + [(0, short)], constant_values=False)
        return bias + np.where(mask, dtype(0), dtype(-np.inf))
    mask = np.pad(mask.astype(dtype), [(0, 0)] * (mask.ndim - 1) + [(0, short)], constant_values=-np.inf)
    return bias + mask


def _attention_ref(attrs, q, k, v, mask=None, past_k=None, past_v=None, nonpad=None):
    out_dtypes = (q.dtype, k.dtype, v.dtype)
    ct = _wide(q.dtype)
    q, k, v = (x.astype(ct) for x in (q, k, v))
    three_d = q.ndim == 3
    if three_d:
        q, k, v = _to_heads(q, attrs.q_num_heads), _to_heads(k, attrs.kv_num_heads), _to_heads(v, attrs.kv_num_heads)
    if past_k is not None:
        k, v = np.concatenate([past_k.astype(ct), k], axis=2), np.concatenate([past_v.astype(ct), v], axis=2)
    b, hq, sq, d = q.shape
    if past_k is not None:
        offset = past_k.shape[2]
    elif nonpad is not None:
        offset = nonpad.reshape(-1, 1, 1, 1) - sq
    else:
        offset = 0
    bias = _attention_bias(attrs, mask, offset, sq, k.shape[2], nonpad, ct)
    scale = np.sqrt(attrs.scale if attrs.scale is not None else 1 / np.sqrt(d)).astype(ct)
    raw = (q * scale) @ (_expand_kv(k, hq).swapaxes(-1, -2) * scale)
    capped = attrs.softcap * np.tanh(raw / attrs.softcap) if attrs.softcap > 0 else raw
    logits = capped + bias
    sm_dtype = ct if attrs.softmax_precision is None else dt.to_numpy(attrs.softmax_precision)
    probs = _softmax(logits.astype(sm_dtype)).astype(ct)
    probs = np.where(np.isneginf(np.max(bias, axis=-1, keepdims=True)), ct(0), probs)  # fully masked rows
    y = probs @ _expand_kv(v, hq)
    if three_d:
        y = y.transpose(0, 2, 1, 3).reshape(b, sq, -1)
    qk = (raw, capped, logits, probs)[attrs.qk_matmul_output_mode]
    qk = np.broadcast_to(qk, np.broadcast_shapes(probs.shape, qk.shape))
    return (y.astype(out_dtypes[0]), k.astype(out_dtypes[1]), v.astype(out_dtypes[2]),
            qk.astype(out_dtypes[0]))[:attrs.outputs]


attention = define_op(
    "nn.attention", pattern=OPAQUE, inputs=(3, 7), attrs=AttentionAttrs,
    infer=_attention_rel, ref=_attention_ref,
    doc="softmax(softcap(Q K^T * scale) + bias) V over inputs (Q, K, V, attn_mask, past_key, past_value, "
        "nonpad_kv_seqlen); 3-D inputs pack heads (q_num_heads/kv_num_heads); GQA repeats kv heads. bias "
        "joins a bool or float attn_mask, is_causal and left/right windows (aligned to the cache offset) and "
        "nonpad key padding. Outputs (Y, present_key, present_value, qk_matmul_output per its mode).")


# ---------------------------------------------------------------------------------------------
# FlexAttention


@dataclass(frozen=True)
class FlexAttentionAttrs:
    scale: float | None = None
    softmax_precision: str | None = None  # a dtype name; default float32 (float64 for float64 inputs)


def flex_softmax_dtype(attrs, dtype: str) -> str:
    """The dtype scores are modified and normalized in."""
    if attrs.softmax_precision is not None:
        return attrs.softmax_precision
    return "float64" if dtype == "float64" else "float32"


def _flex_rel(attrs, types, values):
    mods, (q, k, v) = types[:2], (tensor(types[i], n) for i, n in ((2, "Q"), (3, "K"), (4, "V")))
    for m, n in zip(mods, ("score_mod", "prob_mod")):
        if m is not None and (not isinstance(m, FuncType) or len(m.params) != 1):
            raise TypeInferenceError(f"{n} must be a function of one tensor, got {m}")
    check_dtype(q, FLOAT_DTYPES, "Q")
    for t, n in ((k, "K"), (v, "V")):
        if t.dtype != q.dtype:
            raise TypeInferenceError(f"{n} has dtype {t.dtype}; expected {q.dtype} like Q")
    if attrs.softmax_precision is not None:
        check_dtype(TensorType(None, attrs.softmax_precision), FLOAT_DTYPES, "softmax_precision")
    for t, n in ((q, "Q"), (k, "K"), (v, "V")):
        _rank(t, (4,), n)
    _, b, hq, sq, _, _, _, dv = _qkv_dims(attrs, q, k, v)
    return TensorType((b, hq, sq, dv), q.dtype)


def _flex_ref(attrs, score_mod, prob_mod, q, k, v):
    hq, d = q.shape[1], q.shape[3]
    ct, sm = _wide(q.dtype), dt.to_numpy(flex_softmax_dtype(attrs, dt.from_numpy(q.dtype)))
    scale = np.sqrt(attrs.scale if attrs.scale is not None else 1 / np.sqrt(d)).astype(ct)
    scores = ((q.astype(ct) * scale) @ (_expand_kv(k, hq).astype(ct).swapaxes(-1, -2) * scale)).astype(sm)
    if score_mod is not None:
        scores = np.asarray(score_mod(scores)[0], sm)
    probs = _softmax(scores)
    if prob_mod is not None:
        probs = np.asarray(prob_mod(probs)[0], sm)
    return (probs.astype(ct) @ _expand_kv(v, hq).astype(ct)).astype(q.dtype)


flex_attention = define_op(
    "nn.flex_attention", pattern=OPAQUE, inputs=5, attrs=FlexAttentionAttrs,
    infer=_flex_rel, ref=_flex_ref,
    doc="Attention over rank-4 (Q, K, V) with optional modifier functions (first two inputs, `()` when "
        "absent): score_mod on the scaled scores, prob_mod on the softmax; both run in the softmax "
        "dtype (B, Hq, L, S) -> same. GQA by head repetition.")


# ---------------------------------------------------------------------------------------------
# RotaryEmbedding, SwiGLU


@dataclass(frozen=True)
class RotaryEmbeddingAttrs:
    interleaved: int = 0
    num_heads: int | None = None
    rotary_embedding_dim: int = 0


def _rotary_rel(attrs, types, values):
    x, cos, sin = (tensor(types[i], n) for i, n in enumerate(("X", "cos_cache", "sin_cache")))
    check_dtype(x, ("float32", "float16", "bfloat16"), "X")
    _rank(x, (3, 4), "X")
    if x.ndim == 3 and not attrs.num_heads:
        raise TypeInferenceError("a 3-D X needs the num_heads attribute")
    for t, n in ((cos, "cos_cache"), (sin, "sin_cache")):
        if t.dtype != x.dtype:
            raise TypeInferenceError(f"{n} has dtype {t.dtype}; expected {x.dtype} like X")
    pos = _opt(types, 3)
    if pos is not None:
        check_dtype(pos, ("int64",), "position_ids")
        _rank(pos, (2,), "position_ids")
    for t, n in ((cos, "cos_cache"), (sin, "sin_cache")):
        _rank(t, (2,) if pos is not None else (3,), n)
    if x.shape is not None and cos.shape is not None:
        head = x.shape[3] if x.ndim == 4 else _div(x.shape[2], attrs.num_heads, "X hidden size / num_heads")
        rot = attrs.rotary_embedding_dim or head
        if isinstance(rot, int):
            _same(cos.shape[-1], _div(rot, 2, "rotary dim"), "cos_cache last dim vs rotary dim / 2")
    return x


def _rotary_ref(attrs, x, cos, sin, pos=None):
    if x.ndim == 4:
        x4 = x.transpose(0, 2, 1, 3)
    else:
        x4 = x.reshape(x.shape[0], x.shape[1], attrs.num_heads, -1)  # (B, S, H, D)
    rd = attrs.rotary_embedding_dim or x4.shape[-1]
    if pos is not None:
        cos, sin = cos[pos], sin[pos]
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    rot, keep = x4[..., :rd], x4[..., rd:]
    x1, x2 = (rot[..., 0::2], rot[..., 1::2]) if attrs.interleaved else (rot[..., :rd // 2], rot[..., rd // 2:])
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    if attrs.interleaved:
        rot = np.stack([real, imag], axis=-1).reshape(rot.shape)
    else:
        rot = np.concatenate([real, imag], axis=-1)
    y = np.concatenate([rot, keep], axis=-1).astype(x.dtype)
    return y.reshape(x.shape) if x.ndim == 3 else y.transpose(0, 2, 1, 3)


rotary_embedding = define_op(
    "nn.rotary_embedding", pattern=INJECTIVE, inputs=(3, 4), attrs=RotaryEmbeddingAttrs,
    infer=_rotary_rel, ref=_rotary_ref,
    doc="RoPE: rotate the first rotary_embedding_dim features of each head (halves, or even/odd pairs "
        "when interleaved) by cos/sin caches, gathered by position_ids when given. X is (B, H, S, D) or "
        "(B, S, H*D) with num_heads.")


@dataclass(frozen=True)
class SwiGLUAttrs:
    alpha: float = 1.0


def _swiglu_rel(attrs, types, values):
    a, b = tensor(types[0], "A"), tensor(types[1], "B")
    check_dtype(a, FLOAT_DTYPES, "A")
    if b.dtype != a.dtype:
        raise TypeInferenceError(f"B has dtype {b.dtype}; expected {a.dtype} like A")
    if a.shape is None or b.shape is None:
        return a if a.shape is not None else b
    if len(a.shape) != len(b.shape):
        raise TypeInferenceError(f"A {a.shape} and B {b.shape} must have the same shape (no broadcasting)")
    return TensorType(tuple(_same(x, y, "A/B dims") for x, y in zip(a.shape, b.shape)), a.dtype)


def _swiglu_ref(attrs, a, b):
    gate = (1 / (1 + np.exp(-attrs.alpha * a))).astype(a.dtype)
    return (a * gate * b).astype(a.dtype)


swiglu = define_op(
    "nn.swiglu", pattern=BROADCAST, inputs=2, attrs=SwiGLUAttrs, infer=_swiglu_rel, ref=_swiglu_ref,
    doc="A * sigmoid(alpha * A) * B for same-shaped A (gate) and B (value).")
