"""Recurrent ops (RNN, GRU, LSTM, CausalConvWithState, LinearAttention): references against
onnxruntime or direct formulas, chunked-streaming invariants, and type relations."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

import kiln.onnx_backend as kb
from kiln.errors import TypeInferenceError
from kiln.ir.expr import Var, absent
from kiln.ir.types import ANY, SizeVar, TensorType, TupleType
from kiln.op.registry import get_op

RNG = np.random.default_rng(0)


def single_node_model(op_type, inputs, n_outputs, opset, **attrs):
    """A one-node model whose graph inputs are the non-None entries of `inputs` (name -> array)."""
    names = [n if v is not None else "" for n, v in inputs.items()]
    out_type = helper.np_dtype_to_tensor_dtype(next(iter(inputs.values())).dtype)
    outs = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, names, outs, **attrs)
    g = helper.make_graph([node], "t", [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                                        for n, v in inputs.items() if v is not None],
                          [helper.make_tensor_value_info(o, out_type, None) for o in outs])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return onnx.shape_inference.infer_shapes(m)


def run_both(op_type, inputs, n_outputs, opset=22, **attrs):
    m = single_node_model(op_type, inputs, n_outputs, opset, **attrs)
    feeds = {n: v for n, v in inputs.items() if v is not None}
    ours = kb.prepare(m).run(feeds)
    theirs = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    return ours, theirs


def rand(*shape, dtype=np.float32, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(dtype)


GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def rnn_inputs(op, seq, batch, inp, hidden, nd, layout, dtype, full=True):
    g = GATES[op]
    x = rand(batch, seq, inp, dtype=dtype) if layout else rand(seq, batch, inp, dtype=dtype)
    state = (batch, nd, hidden) if layout else (nd, batch, hidden)
    ins = {"X": x, "W": rand(nd, g * hidden, inp, dtype=dtype, scale=0.5),
           "R": rand(nd, g * hidden, hidden, dtype=dtype, scale=0.5)}
    if full:
        ins["B"] = rand(nd, 2 * g * hidden, dtype=dtype, scale=0.5)
        ins["sequence_lens"] = RNG.integers(1, seq + 1, batch).astype(np.int32)
        ins["initial_h"] = rand(*state, dtype=dtype)
        if op == "LSTM":
            ins["initial_c"] = rand(*state, dtype=dtype)
            ins["P"] = rand(nd, 3 * hidden, dtype=dtype, scale=0.5)
    return ins


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_recurrent_matches_onnxruntime(op, direction):
    nd = 2 if direction == "bidirectional" else 1
    ins = rnn_inputs(op, seq=5, batch=3, inp=7, hidden=5, nd=nd, layout=0, dtype=np.float32)
    extra = {"linear_before_reset": 1} if op == "GRU" else {}
    ours, theirs = run_both(op, ins, 3 if op == "LSTM" else 2, direction=direction, hidden_size=5, **extra)
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(o, t, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["nn.rnn", "nn.gru", "nn.lstm"])
def test_layout_one_is_batch_major(name):
    """onnxruntime lacks layout=1; it must equal layout 0 on swapped batch/sequence axes."""
    op_type = {"nn.rnn": "RNN", "nn.gru": "GRU", "nn.lstm": "LSTM"}[name]
    ins = rnn_inputs(op_type, seq=4, batch=3, inp=2, hidden=3, nd=2, layout=1, dtype=np.float32)
    op = get_op(name)
    args = list(ins.values())
    swapped = [a.swapaxes(0, 1) if k in ("X", "initial_h", "initial_c") else a for k, a in ins.items()]
    batch_major = op.reference(op.attrs_type(direction="bidirectional", layout=1), *args)
    seq_major = op.reference(op.attrs_type(direction="bidirectional"), *swapped)
    np.testing.assert_array_equal(batch_major[0], seq_major[0].transpose(2, 0, 1, 3))
    for b, s in zip(batch_major[1:], seq_major[1:]):
        np.testing.assert_array_equal(b, s.swapaxes(0, 1))


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_recurrent_defaults_and_size_one_dims(op):
    """Omitted B/initial states/sequence_lens, batch 1, hidden 1, input 1, and only Y requested."""
    ins = rnn_inputs(op, seq=1, batch=1, inp=1, hidden=1, nd=1, layout=0, dtype=np.float32, full=False)
    ours, theirs = run_both(op, ins, 1, hidden_size=1)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op,acts,alpha,beta", [
    ("RNN", ["Relu", "LeakyRelu"], [0.3], []),
    ("GRU", ["HardSigmoid", "Softsign", "Sigmoid", "Elu"], [0.3, 0.7], [0.4]),
    ("LSTM", ["Sigmoid", "ScaledTanh", "Affine", "HardSigmoid", "Tanh", "Softplus"], [0.9, 0.5, 0.2], [1.1, 0.1, 0.5]),
])
def test_activations_alpha_beta_and_clip(op, acts, alpha, beta):
    """alpha/beta are consumed in order by the functions that take them; clip bounds their inputs."""
    ins = rnn_inputs(op, seq=4, batch=2, inp=3, hidden=5, nd=2, layout=0, dtype=np.float32)
    scales = {k: v for k, v in (("activation_alpha", alpha), ("activation_beta", beta)) if v}
    ours, theirs = run_both(op, ins, 3 if op == "LSTM" else 2, direction="bidirectional", hidden_size=5,
                            activations=acts, clip=0.8, **scales)
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(o, t, rtol=1e-5, atol=1e-5)


def test_lstm_input_forget():
    ins = rnn_inputs("LSTM", seq=3, batch=2, inp=4, hidden=3, nd=1, layout=0, dtype=np.float32)
    ours, theirs = run_both("LSTM", ins, 3, hidden_size=3, input_forget=1)
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(o, t, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype,tol", [(np.float16, 2e-3), (np.float64, 1e-6)])
def test_other_dtypes_follow_float32(dtype, tol):
    ins = rnn_inputs("LSTM", seq=3, batch=2, inp=4, hidden=3, nd=2, layout=0, dtype=dtype)
    op = get_op("nn.lstm")
    attrs = op.attrs_type(direction="bidirectional")
    ours = op.reference(attrs, *ins.values())
    wide = op.reference(attrs, *(v.astype(np.float32) if v.dtype == dtype else v for v in ins.values()))
    for o, w in zip(ours, wide):
        assert o.dtype == dtype
        np.testing.assert_allclose(o, w, rtol=tol, atol=tol)


def test_sequence_lens_zero_pads_and_keeps_last_valid_state():
    op, attrs = get_op("nn.rnn"), get_op("nn.rnn").attrs_type(direction="reverse")
    x, w, r = rand(4, 2, 3), rand(1, 2, 3), rand(1, 2, 2)
    y, yh = op.reference(attrs, x, w, r, None, np.array([4, 2], np.int32))
    y_short, yh_short = op.reference(attrs, x[:2, 1:], w, r)
    assert np.all(y[2:, :, 1] == 0)
    np.testing.assert_allclose(y[:2, :, 1:], y_short, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(yh[:, 1:], yh_short, rtol=1e-5, atol=1e-6)


def test_recurrent_type_relation_symbolic():
    n, t = SizeVar("N"), SizeVar("T")
    x = Var("x", TensorType((n, t, 7), "float32"))
    w = Var("w", TensorType((2, 20, 7), "float32"))
    r = Var("r", TensorType((2, 20, 5), "float32"))
    call = get_op("nn.lstm")(x, w, r, direction="bidirectional", layout=1)
    assert call.type == TupleType((TensorType((n, t, 2, 5), "float32"),) + (TensorType((n, 2, 5), "float32"),) * 2)
    unknown = Var("r", TensorType(None, "float32"))
    assert get_op("nn.rnn")(Var("x", TensorType((t, n, 3), "float32")), Var("w", TensorType((1, ANY, 3), "float32")),
                            unknown).type.fields[1] == TensorType((1, n, ANY), "float32")


@pytest.mark.parametrize("build,msg", [
    (lambda f: get_op("nn.gru")(f((3, 2, 4)), f((1, 9, 4), "float64"), f((1, 9, 3))), "dtype"),
    (lambda f: get_op("nn.gru")(f((3, 2, 4)), f((1, 9, 4)), f((1, 9, 3)), direction="sideways"), "direction"),
    (lambda f: get_op("nn.rnn")(f((3, 2, 4)), f((1, 3, 4)), f((1, 3, 3)), direction="bidirectional"), "W"),
    (lambda f: get_op("nn.lstm")(f((3, 2, 4)), f((1, 12, 5)), f((1, 12, 3))), "W"),
    (lambda f: get_op("nn.rnn")(f((3, 2)), f((1, 3, 4)), f((1, 3, 3))), "rank 3"),
])
def test_recurrent_type_errors(build, msg):
    def f(shape, dtype="float32"):
        return Var("v", TensorType(shape, dtype))

    with pytest.raises(TypeInferenceError, match=msg):
        build(f)


# ---------------------------------------------------------------------------------------------
# CausalConvWithState


def causal_conv_numpy(x, w, bias, past, silu):
    """Per channel: full convolution of (past ++ x) with the kernel, valid part."""
    b, c, n = x.shape
    k = w.shape[2]
    padded = np.concatenate([np.zeros((b, c, k - 1), x.dtype) if past is None else past, x], axis=2)
    y = np.zeros((b, c, n), np.float64)
    for i in range(b):
        for ch in range(c):
            y[i, ch] = np.convolve(padded[i, ch].astype(np.float64), w[ch, 0, ::-1].astype(np.float64), "valid")
    y += 0 if bias is None else bias[:, None]
    return y / (1 + np.exp(-y)) if silu else y


@pytest.mark.parametrize("k", [1, 4])
@pytest.mark.parametrize("with_bias,with_past,act", [(False, False, "none"), (True, True, "silu"),
                                                      (True, False, "swish")])
def test_causal_conv_matches_convolution(k, with_bias, with_past, act):
    op = get_op("nn.causal_conv_with_state")
    x, w = rand(2, 3, 5), rand(3, 1, k)
    bias = rand(3) if with_bias else None
    past = rand(2, 3, k - 1) if with_past else None
    y, state = op.reference(op.attrs_type(activation=act), x, w, bias, past)
    np.testing.assert_allclose(y, causal_conv_numpy(x, w, bias, past, act != "none"), rtol=1e-5, atol=1e-6)
    full = np.concatenate([np.zeros((2, 3, k - 1), np.float32) if past is None else past, x], axis=2)
    np.testing.assert_array_equal(state, full[:, :, full.shape[2] - (k - 1):])


def test_causal_conv_streams_in_chunks():
    op, attrs = get_op("nn.causal_conv_with_state"), get_op("nn.causal_conv_with_state").attrs_type()
    x, w = rand(1, 2, 7, dtype=np.float16), rand(2, 1, 3, dtype=np.float16)
    y_all, s_all = op.reference(attrs, x, w)
    y1, s1 = op.reference(attrs, x[:, :, :2], w)
    y2, s2 = op.reference(attrs, x[:, :, 2:], w, None, s1)
    assert y_all.dtype == np.float16
    np.testing.assert_array_equal(np.concatenate([y1, y2], axis=2), y_all)
    np.testing.assert_array_equal(s2, s_all)


def test_causal_conv_type_relation():
    n, length = SizeVar("N"), SizeVar("L")
    call = get_op("nn.causal_conv_with_state")(Var("x", TensorType((n, 3, length), "float16")),
                                               Var("w", TensorType((3, 1, 4), "float16")))
    assert call.type == TupleType((TensorType((n, 3, length), "float16"), TensorType((n, 3, 3), "float16")))
    with pytest.raises(TypeInferenceError, match="weight"):
        get_op("nn.causal_conv_with_state")(Var("x", TensorType((1, 3, 5), "float32")),
                                            Var("w", TensorType((4, 1, 4), "float32")))
    with pytest.raises(TypeInferenceError, match="activation"):
        get_op("nn.causal_conv_with_state")(Var("x", TensorType((1, 3, 5), "float32")),
                                            Var("w", TensorType((3, 1, 4), "float32")), activation="gelu")


# ---------------------------------------------------------------------------------------------
# LinearAttention


def linear_attention_numpy(q, k, v, state, decay, beta, hq, hkv, rule, scale):
    """The spec's recurrences written per (batch, head, step) with explicit outer products."""
    b, t, _ = q.shape
    dk, dv = q.shape[2] // hq, v.shape[2] // hkv
    s = np.zeros((b, hkv, dk, dv)) if state is None else state.astype(np.float64).copy()
    out = np.zeros((b, t, hq, dv))
    for i in range(b):
        for step in range(t):
            for h in range(hkv):
                kt, vt = k[i, step, h * dk:(h + 1) * dk], v[i, step, h * dv:(h + 1) * dv]
                if rule in ("gated", "gated_delta"):
                    g = decay[i, step, h] if decay.shape[2] == hkv else decay[i, step, h * dk:(h + 1) * dk, None]
                    s[i, h] = np.exp(g) * s[i, h]
                if rule in ("delta", "gated_delta"):
                    bt = beta[i, step, h if beta.shape[2] == hkv else 0]
                    s[i, h] = s[i, h] + bt * np.outer(kt, vt - s[i, h].T @ kt)
                else:
                    s[i, h] = s[i, h] + np.outer(kt, vt)
            for h in range(hq):
                out[i, step, h] = scale * q[i, step, h * dk:(h + 1) * dk] @ s[i, h // (hq // hkv)]
    return out.reshape(b, t, hq * dv), s


@pytest.mark.parametrize("rule,hq,hkv,per_head", [("linear", 2, 2, False), ("gated", 3, 1, False),
                                                  ("delta", 4, 2, True), ("gated_delta", 6, 3, True)])
def test_linear_attention_matches_recurrence(rule, hq, hkv, per_head):
    b, t, dk, dv = 2, 5, 3, 2
    q, k, v = rand(b, t, hq * dk), rand(b, t, hkv * dk, scale=0.5), rand(b, t, hkv * dv)
    decay = -np.abs(rand(b, t, hkv if per_head else hkv * dk)) if "gated" in rule else None
    beta = RNG.uniform(0, 1, (b, t, hkv if per_head else 1)).astype(np.float32) if "delta" in rule else None
    past = rand(b, hkv, dk, dv)
    op = get_op("nn.linear_attention")
    attrs = op.attrs_type(q_num_heads=hq, kv_num_heads=hkv, update_rule=rule, scale=0.7)
    y, s = op.reference(attrs, q, k, v, past, decay, beta)
    y_ref, s_ref = linear_attention_numpy(q, k, v, past, decay, beta, hq, hkv, rule, 0.7)
    np.testing.assert_allclose(y, y_ref, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(s, s_ref, rtol=1e-4, atol=1e-5)


def test_linear_attention_streams_and_default_scale():
    op = get_op("nn.linear_attention")
    attrs = op.attrs_type(q_num_heads=2, kv_num_heads=2, update_rule="linear")
    q, k, v = rand(1, 4, 8), rand(1, 4, 8), rand(1, 4, 6)
    y, s = op.reference(attrs, q, k, v)
    y_ref, _ = linear_attention_numpy(q, k, v, None, None, None, 2, 2, "linear", 0.5)
    np.testing.assert_allclose(y, y_ref, rtol=1e-5, atol=1e-6)
    y1, s1 = op.reference(attrs, q[:, :1], k[:, :1], v[:, :1])
    y2, s2 = op.reference(attrs, q[:, 1:], k[:, 1:], v[:, 1:], s1)
    np.testing.assert_allclose(np.concatenate([y1, y2], axis=1), y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(s2, s, rtol=1e-5, atol=1e-6)


def test_linear_attention_type_relation():
    n, t = SizeVar("N"), SizeVar("T")
    f = lambda shape, dt="float16": Var("v", TensorType(shape, dt))
    op = get_op("nn.linear_attention")
    call = op(f((n, t, 12)), f((n, t, 6)), f((n, t, 10)), f((n, 2, 3, 5), "float32"), f((n, t, 2)), f((n, t, 1)),
              q_num_heads=4, kv_num_heads=2)
    assert call.type == TupleType((TensorType((n, t, 20), "float16"), TensorType((n, 2, 3, 5), "float32")))
    with pytest.raises(TypeInferenceError, match="requires the decay"):
        op(f((n, t, 12)), f((n, t, 6)), f((n, t, 10)), q_num_heads=4, kv_num_heads=2, update_rule="gated")
    with pytest.raises(TypeInferenceError, match="multiple"):
        op(f((n, t, 12)), f((n, t, 6)), f((n, t, 10)), q_num_heads=3, kv_num_heads=2, update_rule="linear")
    with pytest.raises(TypeInferenceError, match="decay"):
        op(f((n, t, 12)), f((n, t, 6)), f((n, t, 10)), absent(), f((n, t, 5)), q_num_heads=4, kv_num_heads=2,
           update_rule="gated")
