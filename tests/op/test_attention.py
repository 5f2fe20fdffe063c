"""Attention family (Attention, FlexAttention, RotaryEmbedding, SwiGLU): references against
onnxruntime and an explicit per-query loop, masking invariants, and type relations."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import kiln.onnx_backend as kb
from kiln.errors import TypeInferenceError
from kiln.ir.expr import Var, absent
from kiln.ir.types import ANY, SizeVar, TensorType, TupleType
from kiln.op.registry import get_op
from tests.op.test_rnn import rand, run_both

ATT = get_op("nn.attention")


def attention_loop(q, k, v, allowed, extra=None, scale=None, softcap=0.0):
    """Y[b, h, i] = sum_j p_j V[b, h*Hkv/Hq, j]: one query at a time, in float64.

    `allowed` (B, Hq, Sq, Skv) says which keys a query may see; `extra` is an additive float mask."""
    b, hq, sq, d = q.shape
    scale = 1 / np.sqrt(d) if scale is None else scale
    y = np.zeros((b, hq, sq, v.shape[-1]))
    for bi in range(b):
        for h in range(hq):
            kv = h // (hq // k.shape[1])
            for i in range(sq):
                s = (k[bi, kv].astype(np.float64) @ q[bi, h, i].astype(np.float64)) * scale
                if softcap:
                    s = softcap * np.tanh(s / softcap)
                if extra is not None:
                    s = s + extra[bi, h, i]
                ok = allowed[bi, h, i]
                if ok.any():
                    p = np.exp(s[ok] - s[ok].max())
                    y[bi, h, i] = (p / p.sum()) @ v[bi, kv][ok]
    return y


def attention(q, k, v, *opt, **kw):
    return ATT.reference(ATT.attrs_type(**kw), q, k, v, *opt)


@pytest.mark.parametrize("hq,hkv", [(3, 3), (6, 2), (4, 1)])
@pytest.mark.parametrize("causal", [0, 1])
def test_attention_4d_matches_loop(hq, hkv, causal):
    q, k, v = rand(2, hq, 5, 7), rand(2, hkv, 3, 7), rand(2, hkv, 3, 1)
    y, pk, pv, qk = attention(q, k, v, is_causal=causal, softcap=1.5, scale=0.3)
    allowed = np.broadcast_to(np.arange(3) <= np.arange(5)[:, None] if causal else True, (2, hq, 5, 3))
    np.testing.assert_allclose(y, attention_loop(q, k, v, allowed, scale=0.3, softcap=1.5), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(pk, k)
    np.testing.assert_array_equal(pv, v)
    assert qk.shape == (2, hq, 5, 3)


def test_attention_windows_and_nonpad_offsets():
    """External cache: query i of batch b sits at position nonpad[b] - Sq + i; windows bound it."""
    q, k, v = rand(2, 2, 3, 4), rand(2, 1, 6, 4), rand(2, 1, 6, 5)
    nonpad = np.array([6, 4])
    y = attention(q, k, v, None, None, None, nonpad, is_causal=1, left_window_size=1)[0]
    pos = nonpad[:, None, None, None] - 3 + np.arange(3)[:, None]
    j = np.arange(6)
    allowed = np.broadcast_to((j <= pos) & (pos - j <= 1) & (j < nonpad[:, None, None, None]), (2, 2, 3, 6))
    np.testing.assert_allclose(y, attention_loop(q, k, v, allowed), rtol=1e-5, atol=1e-6)


def test_attention_masks_pad_short_and_fully_masked_rows_are_zero():
    q, k, v = rand(1, 2, 3, 4), rand(1, 2, 5, 4), rand(1, 2, 5, 3)
    mask = np.array([[True, False, True], [False, False, False], [True, True, False]])
    y, _, _, probs = attention(q, k, v, mask, qk_matmul_output_mode=3)
    allowed = np.broadcast_to(np.pad(mask, [(0, 0), (0, 2)]), (1, 2, 3, 5))
    np.testing.assert_allclose(y, attention_loop(q, k, v, allowed), rtol=1e-5, atol=1e-6)
    assert np.all(y[:, :, 1] == 0) and np.all(probs[:, :, 1] == 0) and not np.isnan(y).any()
    float_mask = np.where(mask, 0.5, -np.inf).astype(np.float32)
    y_float = attention(q, k, v, float_mask)[0]
    np.testing.assert_allclose(y_float, y, rtol=1e-5, atol=1e-6)


def test_attention_3d_packs_heads_and_past_cache_shifts_causal():
    q, k, v = rand(2, 3, 4 * 5), rand(2, 3, 2 * 5), rand(2, 3, 2 * 3)
    pk, pv = rand(2, 2, 4, 5), rand(2, 2, 4, 3)
    y, present_k, present_v, _ = attention(q, k, v, None, pk, pv, is_causal=1, q_num_heads=4, kv_num_heads=2)
    heads = lambda x, n: x.reshape(2, 3, n, -1).transpose(0, 2, 1, 3)
    k4, v4 = np.concatenate([pk, heads(k, 2)], 2), np.concatenate([pv, heads(v, 2)], 2)
    allowed = np.broadcast_to(np.arange(7) <= 4 + np.arange(3)[:, None], (2, 4, 3, 7))
    expect = attention_loop(heads(q, 4), k4, v4, allowed).transpose(0, 2, 1, 3).reshape(2, 3, 12)
    np.testing.assert_allclose(y, expect, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(present_k, k4)
    np.testing.assert_array_equal(present_v, v4)


@pytest.mark.parametrize("kw,mask", [
    ({}, None),
    ({"is_causal": 1, "scale": 0.2}, None),
    ({"softcap": 2.0, "qk_matmul_output_mode": 1}, "float"),
    ({"qk_matmul_output_mode": 2}, "bool"),
    ({"qk_matmul_output_mode": 3}, "float"),
    ({"q_num_heads": 4, "kv_num_heads": 2}, "bool"),
])
def test_attention_matches_onnxruntime(kw, mask):
    three_d = "q_num_heads" in kw
    q = rand(2, 3, 4 * 8) if three_d else rand(2, 4, 3, 8)
    k = rand(2, 5, 2 * 8) if three_d else rand(2, 2, 5, 8)
    v = rand(2, 5, 2 * 6) if three_d else rand(2, 2, 5, 6)
    m = None if mask is None else (rand(3, 7) if mask == "float" else rand(4, 3, 7) > -0.5)
    ins = {"Q": q, "K": k, "V": v, "attn_mask": m, "past_key": rand(2, 2, 2, 8), "past_value": rand(2, 2, 2, 6)}
    ours, theirs = run_both("Attention", ins, 4, opset=23, **kw)
    for o, t in zip(ours, theirs):
        t = np.where(t == np.finfo(t.dtype).min, -np.inf, t)  # onnxruntime masks with -FLT_MAX, ONNX with -inf
        np.testing.assert_allclose(o, t, rtol=1e-5, atol=1e-5)


def test_attention_half_dtypes_and_softmax_precision():
    q, k, v = (rand(1, 2, 3, 8, dtype=np.float16) for _ in range(3))
    y16 = attention(q, k, v, softmax_precision="float32")[0]
    y32 = attention(*(x.astype(np.float32) for x in (q, k, v)))[0]
    assert y16.dtype == np.float16
    np.testing.assert_allclose(y16, y32, rtol=1e-2, atol=1e-2)
    bf = [x.astype(ml_dtypes.bfloat16) for x in (q, k, v)]
    assert attention(*bf, is_causal=1)[0].dtype == ml_dtypes.bfloat16


def f(shape, dtype="float32"):
    return Var("v", TensorType(shape, dtype))


def test_attention_type_relation_symbolic():
    n, s, p = SizeVar("N"), SizeVar("S"), SizeVar("P")
    call = ATT(f((n, s, 24)), f((n, 5, 8)), f((n, 5, 6)), absent(), f((n, 2, p, 4)), f((n, 2, p, 3)),
               q_num_heads=6, kv_num_heads=2)
    assert call.type == TupleType((TensorType((n, s, 18), "float32"), TensorType((n, 2, ANY, 4), "float32"),
                                   TensorType((n, 2, ANY, 3), "float32"), TensorType((n, 6, s, ANY), "float32")))
    call = ATT(f((n, 1, 24)), f((n, s, 8)), f((n, s, 6)), q_num_heads=6, kv_num_heads=2)
    assert call.type.fields[3] == TensorType((n, 6, 1, s), "float32")
    call = ATT(f((1, 4, s, 8)), f((1, 2, 5, 8)), f((1, 2, 5, 3), "float16"), f((s, 5), "bool"),
               f((1, 2, 7, 8)), f((1, 2, 7, 3), "float16"))
    assert call.type.fields[0] == TensorType((1, 4, s, 3), "float32")
    assert call.type.fields[2] == TensorType((1, 2, 12, 3), "float16")


@pytest.mark.parametrize("build,msg", [
    (lambda: ATT(f((1, 2, 3, 4)), f((1, 2, 3, 4), "float16"), f((1, 2, 3, 4))), "K has dtype"),
    (lambda: ATT(f((1, 3, 8)), f((1, 3, 8)), f((1, 3, 8))), "q_num_heads"),
    (lambda: ATT(f((1, 3, 2, 4)), f((1, 2, 3, 4)), f((1, 2, 3, 4))), "multiple"),
    (lambda: ATT(f((1, 2, 3, 4)), f((1, 2, 3, 5)), f((1, 2, 3, 4))), "head size"),
    (lambda: ATT(f((1, 2, 3, 4)), f((1, 2, 3, 4)), f((1, 2, 3, 4)), absent(), f((1, 2, 1, 4))), "together"),
    (lambda: ATT(f((1, 2, 3, 4)), f((1, 2, 3, 4)), f((1, 2, 3, 4)), absent(), f((1, 2, 1, 4)), f((1, 2, 1, 4)),
                 f((1,), "int64")), "nonpad"),
    (lambda: ATT(f((1, 2, 3, 4), "int32"), f((1, 2, 3, 4), "int32"), f((1, 2, 3, 4))), "dtype"),
])
def test_attention_type_errors(build, msg):
    with pytest.raises(TypeInferenceError, match=msg):
        build()


# ---------------------------------------------------------------------------------------------
# FlexAttention


def flex_model(score_mod: bool, dtype=TensorProto.FLOAT):
    """Q (1, 4, 3, 8), K/V (1, 2, 5, 8); score_mod adds a relative-position bias (j - i)."""
    attrs = {}
    if score_mod:
        rel = np.arange(5)[None, :] - np.arange(3)[:, None]
        body = helper.make_graph(
            [helper.make_node("Add", ["s", "rel"], ["out"])], "score_mod",
            [helper.make_tensor_value_info("s", TensorProto.FLOAT, None)],
            [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
            [onnx.numpy_helper.from_array(rel.astype(np.float32), "rel")])
        attrs["score_mod"] = body
    node = helper.make_node("FlexAttention", ["Q", "K", "V"], ["Y"], domain="ai.onnx.preview", **attrs)
    g = helper.make_graph([node], "t", [helper.make_tensor_value_info("Q", dtype, (1, 4, 3, 8)),
                                        helper.make_tensor_value_info("K", dtype, (1, 2, 5, 8)),
                                        helper.make_tensor_value_info("V", dtype, (1, 2, 5, 8))],
                          [helper.make_tensor_value_info("Y", dtype, (1, 4, 3, 8))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 26), helper.make_opsetid("ai.onnx.preview", 1)])
    m.ir_version = 11
    return m


@pytest.mark.parametrize("score_mod", [False, True])
def test_flex_attention_score_mod(score_mod):
    q, k, v = rand(1, 4, 3, 8), rand(1, 2, 5, 8), rand(1, 2, 5, 8)
    y = kb.prepare(flex_model(score_mod)).run({"Q": q, "K": k, "V": v})[0]
    rel = np.arange(5)[None, :] - np.arange(3)[:, None]
    extra = np.broadcast_to(rel if score_mod else 0, (1, 4, 3, 5))
    expect = attention_loop(q, k, v, np.ones((1, 4, 3, 5), bool), extra=extra)
    np.testing.assert_allclose(y, expect, rtol=1e-5, atol=1e-6)


def test_flex_attention_half_inputs_use_float32_scores_and_type_relation():
    call = kb.prepare(flex_model(True, TensorProto.FLOAT16)).mod.main.body
    assert call.type == TupleType((TensorType((1, 4, 3, 8), "float16"),))
    flex = get_op("nn.flex_attention")
    n = SizeVar("N")
    assert flex(absent(), absent(), f((n, 4, 3, 8)), f((n, 2, 5, 8)), f((n, 2, 5, 6))).type == \
        TensorType((n, 4, 3, 6), "float32")
    with pytest.raises(TypeInferenceError, match="rank 4"):
        flex(absent(), absent(), f((4, 3, 8)), f((2, 5, 8)), f((2, 5, 6)))


# ---------------------------------------------------------------------------------------------
# RotaryEmbedding, SwiGLU


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rot_dim,three_d,with_pos", [(0, False, True), (4, False, True), (0, True, True),
                                                      (6, True, False)])
def test_rotary_embedding_matches_onnxruntime(interleaved, rot_dim, three_d, with_pos):
    b, h, s, d = 2, 3, 5, 8
    half = (rot_dim or d) // 2
    x = rand(b, s, h * d) if three_d else rand(b, h, s, d)
    cache = (11, half) if with_pos else (b, s, half)
    ins = {"X": x, "cos_cache": rand(*cache), "sin_cache": rand(*cache),
           "position_ids": RNG_POS.integers(0, 11, (b, s)) if with_pos else None}
    kw = {"num_heads": h} if three_d else {}
    ours, theirs = run_both("RotaryEmbedding", ins, 1, opset=23, interleaved=interleaved,
                            rotary_embedding_dim=rot_dim, **kw)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-6, atol=1e-6)


RNG_POS = np.random.default_rng(1)


def test_rotary_embedding_type_relation():
    rope = get_op("nn.rotary_embedding")
    n = SizeVar("N")
    assert rope(f((n, 7, 12)), f((n, 7, 3)), f((n, 7, 3)), num_heads=2).type == TensorType((n, 7, 12), "float32")
    with pytest.raises(TypeInferenceError, match="num_heads"):
        rope(f((1, 7, 12)), f((1, 7, 3)), f((1, 7, 3)))
    with pytest.raises(TypeInferenceError, match="cos_cache"):
        rope(f((1, 2, 7, 6)), f((9, 2)), f((9, 2)), f((1, 7), "int64"))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, ml_dtypes.bfloat16])
def test_swiglu(dtype):
    a, b = rand(3, 1, 5, dtype=dtype), rand(3, 1, 5, dtype=dtype)
    op = get_op("nn.swiglu")
    y = op.reference(op.attrs_type(alpha=1.7), a, b)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    assert y.dtype == dtype
    tol = 1e-6 if dtype in (np.float32, np.float64) else 2e-2
    np.testing.assert_allclose(y.astype(np.float64), a64 / (1 + np.exp(-1.7 * a64)) * b64, rtol=tol, atol=tol)


def test_swiglu_type_relation():
    op, n = get_op("nn.swiglu"), SizeVar("N")
    assert op(f((n, 4)), f((ANY, 4))).type == TensorType((n, 4), "float32")
    with pytest.raises(TypeInferenceError, match="same shape"):
        op(f((1, 4)), f((4,)))
    with pytest.raises(TypeInferenceError, match="A/B dims"):
        op(f((2, 4)), f((1, 4)))
