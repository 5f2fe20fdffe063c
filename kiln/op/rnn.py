"""Recurrent operators: the ONNX RNN, GRU and LSTM cells, plus the stateful sequence ops of
linear-attention models (LinearAttention, CausalConvWithState) that carry a past/present state.

RNN/GRU/LSTM references compute in float32 (float64 for float64 inputs) and cast the results
back, so half-precision models accumulate as accelerators do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kiln.errors import TypeInferenceError
from kiln.ir.types import ANY, Dim, TensorType, TupleType
from kiln.op.registry import OPAQUE, define_op
from kiln.op.typerel import check_dtype, tensor

RNN_DTYPES = ("bfloat16", "float16", "float32", "float64")
DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}

# name -> (uses alpha, uses beta, default alpha, default beta, f(x, alpha, beta))
ACTIVATIONS: dict[str, tuple[bool, bool, float, float, Callable]] = {
    "relu": (False, False, 0.0, 0.0, lambda x, a, b: np.maximum(x, 0)),
    "tanh": (False, False, 0.0, 0.0, lambda x, a, b: np.tanh(x)),
    "sigmoid": (False, False, 0.0, 0.0, lambda x, a, b: 1 / (1 + np.exp(-x))),
    "affine": (True, True, 1.0, 0.0, lambda x, a, b: a * x + b),
    "leakyrelu": (True, False, 0.01, 0.0, lambda x, a, b: np.where(x >= 0, x, a * x)),
    "thresholdedrelu": (True, False, 1.0, 0.0, lambda x, a, b: np.where(x > a, x, 0)),
    "scaledtanh": (True, True, 1.0, 1.0, lambda x, a, b: a * np.tanh(b * x)),
    "hardsigmoid": (True, True, 0.2, 0.5, lambda x, a, b: np.clip(a * x + b, 0, 1)),
    "elu": (True, False, 1.0, 0.0, lambda x, a, b: np.where(x >= 0, x, a * np.expm1(np.minimum(x, 0)))),
    "softsign": (False, False, 0.0, 0.0, lambda x, a, b: x / (1 + np.abs(x))),
    "softplus": (False, False, 0.0, 0.0, lambda x, a, b: np.logaddexp(0, x)),
}


@dataclass(frozen=True)
class RNNAttrs:
    activation_alpha: tuple[float, ...] = ()
    activation_beta: tuple[float, ...] = ()
    activations: tuple[str, ...] = ("Tanh", "Tanh")
    clip: float | None = None
    direction: str = "forward"
    hidden_size: int | None = None
    layout: int = 0


@dataclass(frozen=True)
class GRUAttrs:
    activation_alpha: tuple[float, ...] = ()
    activation_beta: tuple[float, ...] = ()
    activations: tuple[str, ...] = ("Sigmoid", "Tanh")
    clip: float | None = None
    direction: str = "forward"
    hidden_size: int | None = None
    layout: int = 0
    linear_before_reset: int = 0


@dataclass(frozen=True)
class LSTMAttrs:
    activation_alpha: tuple[float, ...] = ()
    activation_beta: tuple[float, ...] = ()
    activations: tuple[str, ...] = ("Sigmoid", "Tanh", "Tanh")
    clip: float | None = None
    direction: str = "forward"
    hidden_size: int | None = None
    input_forget: int = 0
    layout: int = 0


# ---------------------------------------------------------------------------------------------
# type relation


def _opt(types: list, i: int):
    """The i-th input's type, None when omitted (trailing omitted inputs are dropped)."""
    return types[i] if i < len(types) else None


def _dims_agree(a: Dim, b: Dim) -> bool:
    return not (isinstance(a, int) and isinstance(b, int) and a != b)


def _states_and_outputs(types, first: int, states, peepholes: bool, dims: tuple, dtype: str,
                        layout: int) -> TupleType:
    """Check the initial states (and peepholes) from input `first` on; the (Y, states...) output type.
    dims: (batch, seq, directions, hidden)."""
    batch, seq, nd, hidden = dims
    state = (batch, nd, hidden) if layout else (nd, batch, hidden)
    for i, name in enumerate(states):
        _expect(_opt(types, first + i), state, name, dtype)
    if peepholes:
        _expect(_opt(types, first + len(states)), (nd, _mul(3, hidden)), "P", dtype)
    y = (batch, seq, nd, hidden) if layout else (seq, nd, batch, hidden)
    return TupleType((TensorType(y, dtype),) + (TensorType(state, dtype),) * len(states))


def _expect(t: TensorType | None, shape: tuple[Dim, ...], what: str, dtype: str | None = None) -> None:
    """Check an optional input's dtype, rank and statically known dims."""
    if t is None:
        return
    if dtype is not None and t.dtype != dtype:
        raise TypeInferenceError(f"{what} has dtype {t.dtype}; expected {dtype}")
    if t.shape is not None and (len(t.shape) != len(shape)
                                or not all(_dims_agree(a, b) for a, b in zip(t.shape, shape))):
        raise TypeInferenceError(f"{what} has shape {t.shape}; expected {shape}")


def _mul(a: Dim, b: Dim) -> Dim:
    return a * b if isinstance(a, int) and isinstance(b, int) else ANY


def _recurrent_rel(gates: int, states: tuple[str, ...], peepholes: bool = False):
    """Type relation of a recurrent cell with `gates` gate blocks and one output per state.

    Inputs: X, W, R, B, sequence_lens, one initial value per state, then (LSTM) peepholes P."""

    def rel(attrs, types, values):
        x, w, r = (tensor(types[i], n) for i, n in enumerate(("X", "W", "R")))
        check_dtype(x, RNN_DTYPES, "X")
        if attrs.direction not in DIRECTIONS:
            raise TypeInferenceError(f"direction must be forward, reverse or bidirectional, "
                                     f"got {attrs.direction!r}")
        if attrs.layout not in (0, 1):
            raise TypeInferenceError(f"layout must be 0 or 1, got {attrs.layout}")
        if x.shape is not None and len(x.shape) != 3:
            raise TypeInferenceError(f"X must have rank 3, got shape {x.shape}")
        nd = DIRECTIONS[attrs.direction]
        hidden: Dim = attrs.hidden_size if attrs.hidden_size is not None else (
            r.shape[-1] if r.shape is not None else ANY)
        seq, batch, inp = (ANY, ANY, ANY) if x.shape is None else (
            (x.shape[1], x.shape[0], x.shape[2]) if attrs.layout else x.shape)
        gh = _mul(gates, hidden)
        _expect(w, (nd, gh, inp), "W", x.dtype)
        _expect(r, (nd, gh, hidden), "R", x.dtype)
        _expect(_opt(types, 3), (nd, _mul(2, gh)), "B", x.dtype)
        _expect(_opt(types, 4), (batch,), "sequence_lens", "int32")
        return _states_and_outputs(types, 5, states, peepholes, (batch, seq, nd, hidden), x.dtype, attrs.layout)

    return rel


# ---------------------------------------------------------------------------------------------
# reference


def bound_activations(attrs, per_dir: int, nd: int) -> list[list[tuple[str, float, float]]]:
    """Per direction, (ACTIVATIONS key, alpha, beta) of each cell function; the reference and the
    compute both read them from here.

    alpha and beta lists are consumed in order by the functions that take them; a list of
    `per_dir` names serves every direction."""
    names = list(attrs.activations)
    if len(names) == per_dir:
        names = names * nd
    if len(names) < per_dir * nd:
        raise ValueError(f"{attrs.direction} needs {per_dir * nd} activations, got {len(attrs.activations)}")
    alphas, betas = list(attrs.activation_alpha), list(attrs.activation_beta)
    out = []
    for name in names[:per_dir * nd]:
        key = name.lower()
        if key not in ACTIVATIONS:
            raise ValueError(f"unknown activation {name!r}")
        use_a, use_b, a, b, _ = ACTIVATIONS[key]
        a = alphas.pop(0) if use_a and alphas else a
        b = betas.pop(0) if use_b and betas else b
        out.append((key, float(a), float(b)))
    return [out[d * per_dir:(d + 1) * per_dir] for d in range(nd)]


def _activations(attrs, per_dir: int, nd: int) -> list[list[Callable]]:
    """Per direction, the cell's numpy activation functions with their alpha/beta bound."""
    return [[lambda x, f=ACTIVATIONS[k][4], a=a, b=b: f(x, a, b) for k, a, b in d]
            for d in bound_activations(attrs, per_dir, nd)]


def _clipper(clip: float | None) -> Callable:
    return (lambda x: x) if clip is None else (lambda x: np.clip(x, -clip, clip))


def _rnn_cell(acts, clip, p, r, rb, states, peep, attrs):
    (h,) = states
    return (acts[0](clip(p + h @ r.T + rb)),)


def _gru_cell(acts, clip, p, r, rb, states, peep, attrs):
    (h,) = states
    f, g = acts
    pz, pr, ph = np.split(p, 3, axis=-1)
    rz, rr, rh = np.split(r, 3)
    rbz, rbr, rbh = np.split(rb, 3)
    z = f(clip(pz + h @ rz.T + rbz))
    rt = f(clip(pr + h @ rr.T + rbr))
    if attrs.linear_before_reset:
        ht = g(clip(ph + rt * (h @ rh.T + rbh)))
    else:
        ht = g(clip(ph + (rt * h) @ rh.T + rbh))
    return ((1 - z) * ht + z * h,)


def _lstm_cell(acts, clip, p, r, rb, states, peep, attrs):
    h, c = states
    f, g, hf = acts
    p_i, p_o, p_f = np.split(peep, 3)
    gi, go, gf, gc = np.split(p + h @ r.T + rb, 4, axis=-1)
    i = f(clip(gi + p_i * c))
    ft = 1 - i if attrs.input_forget else f(clip(gf + p_f * c))
    c_new = ft * c + i * g(clip(gc))
    o = f(clip(go + p_o * c_new))
    return o * hf(c_new), c_new


def _run_direction(step, x, states, lens, reverse):
    """Run `step` over time for one direction. Row b sees only its first lens[b] steps (in
    reverse order when `reverse`); later steps keep its state and output zeros."""
    seq, batch = x.shape[:2]
    t = np.arange(seq)[:, None]
    valid = t < lens[None, :]
    order = np.where(valid, lens[None, :] - 1 - t, t) if reverse else np.broadcast_to(t, (seq, batch))
    cols = np.arange(batch)
    xs = x[order, cols]
    ys = []
    for s in range(seq):
        new = step(xs[s], states)
        keep = valid[s][:, None]
        states = tuple(np.where(keep, n, o) for n, o in zip(new, states))
        ys.append(np.where(keep, states[0], 0))
    y = np.stack(ys) if ys else np.zeros((0, batch, states[0].shape[-1]), states[0].dtype)
    out = np.empty_like(y)
    out[order, cols] = y
    return out, states


def _scan_ref(cell: Callable, per_dir: int, n_states: int, attrs, proj, r, rb, seq_lens, rest, out_dtype):
    """The recurrence given each direction's input projection proj[d] = X·W^T + Wb, (seq, batch, gates):
    normalizes layout and omitted inputs, runs each direction. rb: the bias added to h·R^T (ONNX's Rb)."""
    ct = proj.dtype
    rest = [None if v is None else v.astype(ct) for v in rest] + [None] * (n_states + 1 - len(rest))
    inits, peep = rest[:n_states], rest[n_states]
    if attrs.layout:
        inits = [None if v is None else v.swapaxes(0, 1) for v in inits]
    nd, seq, batch, gh = proj.shape
    hidden = r.shape[-1]
    rb = np.zeros((nd, gh), ct) if rb is None else rb.astype(ct)
    inits = [np.zeros((nd, batch, hidden), ct) if v is None else v for v in inits]
    peep = np.zeros((nd, 3 * hidden), ct) if peep is None else peep
    lens = np.full(batch, seq, np.int64) if seq_lens is None else seq_lens.astype(np.int64)
    acts = _activations(attrs, per_dir, nd)
    clip = _clipper(attrs.clip)
    ys, finals = [], []
    for d in range(nd):
        def step(pt, states, d=d):
            return cell(acts[d], clip, pt, r[d], rb[d], states, peep[d], attrs)

        reverse = attrs.direction == "reverse" or d == 1
        y, st = _run_direction(step, proj[d], tuple(v[d] for v in inits), lens, reverse)
        ys.append(y)
        finals.append(st)
    y = np.stack(ys, axis=1)
    states = [np.stack([f[k] for f in finals]) for k in range(n_states)]
    if attrs.layout:
        y = y.transpose(2, 0, 1, 3)
        states = [s.swapaxes(0, 1) for s in states]
    return tuple(v.astype(out_dtype) for v in [y] + states)


def _compute_type(dtype) -> type:
    return np.float64 if dtype == np.float64 else np.float32


def _recurrent_ref(cell: Callable, per_dir: int, n_states: int):
    """Reference of a recurrent op: each direction's input projection, then the recurrence.

    Inputs after sequence_lens are the initial states, then (LSTM) the peepholes."""

    def ref(attrs, x, w, r, b=None, seq_lens=None, *rest):
        ct = _compute_type(x.dtype)
        xs, w, r = x.astype(ct), w.astype(ct), r.astype(ct)
        if attrs.layout:
            xs = xs.swapaxes(0, 1)
        nd, gh = w.shape[:2]
        b = np.zeros((nd, 2 * gh), ct) if b is None else b.astype(ct)
        proj = np.stack([xs @ w[d].T + b[d, :gh] for d in range(nd)])
        return _scan_ref(cell, per_dir, n_states, attrs, proj, r, b[:, gh:], seq_lens, rest, x.dtype)

    return ref


def _recurrence_ref(cell: Callable, per_dir: int, n_states: int):
    """Reference of a recurrence-only op: XP holds every direction's projection side by side."""

    def ref(attrs, xp, rt, rb=None, seq_lens=None, *rest):
        ct = _compute_type(xp.dtype)
        xs = xp.astype(ct)
        if attrs.layout:
            xs = xs.swapaxes(0, 1)
        nd, gh = rt.shape[0], xs.shape[-1] // rt.shape[0]
        if rt.ndim == 4:  # panels -> (directions, hidden, gates)
            rt = rt.transpose(0, 2, 1, 3).reshape(nd, rt.shape[2], -1)[:, :, :gh]
        proj = np.stack([xs[..., d * gh:(d + 1) * gh] for d in range(nd)])
        r = rt.astype(ct).transpose(0, 2, 1)
        return _scan_ref(cell, per_dir, n_states, attrs, proj, r, rb, seq_lens, rest, xp.dtype)

    return ref


_RNN_DOC = ("{} over a sequence (ONNX semantics): directions, activations with alpha/beta, clip, "
            "sequence_lens (steps past a row's length output zeros), initial states, layout 0/1. "
            "Outputs Y, Y_h{}.")

rnn = define_op(
    "nn.rnn", pattern=OPAQUE, inputs=(3, 6), attrs=RNNAttrs,
    infer=_recurrent_rel(1, ("initial_h",)),
    ref=_recurrent_ref(_rnn_cell, 1, 1),
    doc=_RNN_DOC.format("A simple (Elman) RNN", ""))

gru = define_op(
    "nn.gru", pattern=OPAQUE, inputs=(3, 6), attrs=GRUAttrs,
    infer=_recurrent_rel(3, ("initial_h",)),
    ref=_recurrent_ref(_gru_cell, 2, 1),
    doc=_RNN_DOC.format("A GRU (gates z, r, h; linear_before_reset)", ""))

lstm = define_op(
    "nn.lstm", pattern=OPAQUE, inputs=(3, 8), attrs=LSTMAttrs,
    infer=_recurrent_rel(4, ("initial_h", "initial_c"), peepholes=True),
    ref=_recurrent_ref(_lstm_cell, 3, 2),
    doc=_RNN_DOC.format("An LSTM (gates i, o, f, c; peepholes P; input_forget)", ", Y_c"))



def _recurrence_rel(gates: int, states: tuple[str, ...], peepholes: bool = False):
    """Type relation of a recurrence-only op (kiln/transform/rnn_projection.py makes them).

    Inputs: XP (X's layout, last dim directions x gates x hidden: X·W^T + Wb of every direction), RT
    (R transposed: directions, hidden, gates x hidden; or packed in panels of nr gates, zero-padded:
    directions, panels, hidden, nr), RB (added to h·R^T), sequence_lens, the initial states, then (LSTM)
    the peepholes. Outputs are the full op's."""

    def rel(attrs, types, values):
        xp, rt = tensor(types[0], "XP"), tensor(types[1], "RT")
        check_dtype(xp, RNN_DTYPES, "XP")
        if xp.shape is None or len(xp.shape) != 3 or rt.shape is None or len(rt.shape) not in (3, 4):
            raise TypeInferenceError(f"XP must have rank 3 and RT 3 or 4, got {xp.shape} and {rt.shape}")
        nd, hidden = rt.shape[0], rt.shape[-2 if len(rt.shape) == 4 else 1]
        gh = _mul(gates, hidden)
        if attrs.direction not in DIRECTIONS or DIRECTIONS[attrs.direction] != nd:
            raise TypeInferenceError(f"RT has {nd} directions; direction is {attrs.direction!r}")
        if len(rt.shape) == 3 and not _dims_agree(rt.shape[2], gh):
            raise TypeInferenceError(f"RT has {rt.shape[2]} gate rows; expected {gates} x {hidden}")
        if len(rt.shape) == 4 and isinstance(gh, int) and isinstance(rt.shape[1], int) and isinstance(
                rt.shape[3], int) and not rt.shape[1] * rt.shape[3] - rt.shape[3] < gh <= rt.shape[1] * rt.shape[3]:
            raise TypeInferenceError(f"RT panels {rt.shape} do not hold {gates} x {hidden} gate rows")
        seq, batch = (xp.shape[1], xp.shape[0]) if attrs.layout else xp.shape[:2]
        _expect(xp, (xp.shape[0], xp.shape[1], _mul(nd, gh)), "XP")
        _expect(rt, rt.shape, "RT", xp.dtype)
        _expect(_opt(types, 2), (nd, gh), "RB", xp.dtype)
        _expect(_opt(types, 3), (batch,), "sequence_lens", "int32")
        return _states_and_outputs(types, 4, states, peepholes, (batch, seq, nd, hidden), xp.dtype, attrs.layout)

    return rel


_RECURRENCE_DOC = ("The recurrence of {} given its input projection XP = X·W^T + Wb (all steps, all "
                   "directions) and R^T; the rest as the full op. Made by split-rnn-projection.")

rnn_recurrence = define_op(
    "nn.rnn_recurrence", pattern=OPAQUE, inputs=(2, 5), attrs=RNNAttrs,
    infer=_recurrence_rel(1, ("initial_h",)),
    ref=_recurrence_ref(_rnn_cell, 1, 1), doc=_RECURRENCE_DOC.format("nn.rnn"))

gru_recurrence = define_op(
    "nn.gru_recurrence", pattern=OPAQUE, inputs=(2, 5), attrs=GRUAttrs,
    infer=_recurrence_rel(3, ("initial_h",)),
    ref=_recurrence_ref(_gru_cell, 2, 1), doc=_RECURRENCE_DOC.format("nn.gru"))

lstm_recurrence = define_op(
    "nn.lstm_recurrence", pattern=OPAQUE, inputs=(2, 7), attrs=LSTMAttrs,
    infer=_recurrence_rel(4, ("initial_h", "initial_c"), peepholes=True),
    ref=_recurrence_ref(_lstm_cell, 3, 2), doc=_RECURRENCE_DOC.format("nn.lstm"))


# ---------------------------------------------------------------------------------------------
# stateful sequence ops of linear-attention / state-space models

STATE_DTYPES = ("float16", "bfloat16", "float32")


def _div(a: Dim, b: int) -> Dim:
    """a / b for a dim that must divide evenly (ANY when unknown)."""
    if not isinstance(a, int):
        return ANY
    if b <= 0 or a % b:
        raise TypeInferenceError(f"dim {a} is not divisible by {b}")
    return a // b


def _minus(a: Dim, b: int) -> Dim:
    return a - b if isinstance(a, int) else ANY


@dataclass(frozen=True)
class CausalConvWithStateAttrs:
    activation: str = "none"


def _causal_conv_rel(attrs, types, values):
    x, w = tensor(types[0], "input"), tensor(types[1], "weight")
    check_dtype(x, STATE_DTYPES, "input")
    if attrs.activation not in ("none", "silu", "swish"):
        raise TypeInferenceError(f"activation must be none, silu or swish, got {attrs.activation!r}")
    _expect(x, (ANY, ANY, ANY), "input (batch, channels, length)")
    b, c, _ = x.shape if x.shape is not None else (ANY, ANY, ANY)
    _expect(w, (c, 1, ANY), "weight", x.dtype)
    _expect(_opt(types, 2), (c,), "bias", x.dtype)
    k = w.shape[2] if w.shape is not None else ANY
    _expect(_opt(types, 3), (b, c, _minus(k, 1)), "past_state", x.dtype)
    return TupleType((x, TensorType((b, c, _minus(k, 1)), x.dtype)))


def _causal_conv_ref(attrs, x, w, bias=None, past=None):
    batch, channels, _ = x.shape
    k = w.shape[2]
    pad = np.zeros((batch, channels, k - 1), x.dtype) if past is None else past
    padded = np.concatenate([pad, x], axis=2)
    windows = np.lib.stride_tricks.sliding_window_view(padded.astype(np.float32), k, axis=2)
    y = np.einsum("bclk,ck->bcl", windows, w[:, 0, :].astype(np.float32))
    if bias is not None:
        y = y + bias.astype(np.float32)[:, None]
    if attrs.activation != "none":
        y = y / (1 + np.exp(-y))
    return y.astype(x.dtype), padded[:, :, padded.shape[2] - (k - 1):]


causal_conv_with_state = define_op(
    "nn.causal_conv_with_state", pattern=OPAQUE, inputs=(2, 4), attrs=CausalConvWithStateAttrs,
    infer=_causal_conv_rel, ref=_causal_conv_ref,
    doc="Depthwise causal conv1d over (batch, channels, length) continuing from past_state (the last "
        "k-1 inputs, zeros if omitted), optional SiLU; outputs (output, present_state).")


@dataclass(frozen=True)
class LinearAttentionAttrs:
    chunk_size: int = 64
    kv_num_heads: int | None = None
    q_num_heads: int | None = None
    scale: float = 0.0
    update_rule: str = "gated_delta"


UPDATE_RULES = {"linear": (False, False), "gated": (True, False), "delta": (False, True),
                "gated_delta": (True, True)}  # rule -> (uses decay, uses beta)


def _linear_attention_rel(attrs, types, values):
    q, k, v = (tensor(types[i], n) for i, n in enumerate(("query", "key", "value")))
    check_dtype(q, STATE_DTYPES, "query")
    if attrs.update_rule not in UPDATE_RULES:
        raise TypeInferenceError(f"update_rule must be one of {', '.join(UPDATE_RULES)}, got {attrs.update_rule!r}")
    hq, hkv = attrs.q_num_heads, attrs.kv_num_heads
    if hq is None or hkv is None or hkv <= 0 or hq <= 0 or hq % hkv:
        raise TypeInferenceError(f"q_num_heads ({hq}) must be a positive multiple of kv_num_heads ({hkv})")
    _expect(q, (ANY, ANY, ANY), "query (B, T, H*D)")
    b, steps, qd = q.shape if q.shape is not None else (ANY, ANY, ANY)
    dk = _div(qd, hq)
    _expect(k, (b, steps, _mul(hkv, dk)), "key", q.dtype)
    _expect(v, (b, steps, ANY), "value", q.dtype)
    dv = _div(v.shape[2], hkv) if v.shape is not None else ANY
    for i, name, need, lasts in ((4, "decay", UPDATE_RULES[attrs.update_rule][0], (hkv, _mul(hkv, dk))),
                                 (5, "beta", UPDATE_RULES[attrs.update_rule][1], (hkv, 1))):
        g = _opt(types, i)
        if (g is not None) != need:
            raise TypeInferenceError(f"update_rule {attrs.update_rule!r} {'requires' if need else 'forbids'} "
                                     f"the {name} input")
        _expect(g, (b, steps, ANY), name, q.dtype)
        last = g.shape[-1] if g is not None and g.shape is not None else ANY
        if isinstance(last, int) and ANY not in lasts and last not in lasts:
            raise TypeInferenceError(f"{name} last dim is {last}; expected {' or '.join(map(str, lasts))}")
    past = _opt(types, 3)
    if past is not None:
        check_dtype(past, STATE_DTYPES, "past_state")
    state = TensorType((b, hkv, dk, dv), past.dtype if past is not None else q.dtype)
    _expect(past, state.shape, "past_state")
    return TupleType((TensorType((b, steps, _mul(hq, dv)), q.dtype), state))


def _heads(x: np.ndarray, n: int) -> np.ndarray:
    """(B, T, H*D) -> (B, H, T, D) in float32."""
    b, t, hd = x.shape
    return x.reshape(b, t, n, hd // n).transpose(0, 2, 1, 3).astype(np.float32)


def linear_attention_ref(attrs, q, k, v, past=None, decay=None, beta=None):
    hq, hkv = attrs.q_num_heads, attrs.kv_num_heads
    b, t, _ = q.shape
    q4, k4, v4 = _heads(q, hq), _heads(k, hkv), _heads(v, hkv)
    dk, dv = q4.shape[-1], v4.shape[-1]
    # decay: per key-dim (H_kv*d_k) or per head (H_kv, broadcast over d_k); beta: per head or shared
    g4 = None if decay is None else _heads(decay, hkv)
    b4 = None if beta is None else _heads(beta, beta.shape[-1])
    state = np.zeros((b, hkv, dk, dv), np.float32) if past is None else past.astype(np.float32)
    scale = attrs.scale if attrs.scale else 1 / np.sqrt(dk)
    out = np.zeros((b, hq, t, dv), np.float32)
    for i in range(t):
        kt, vt = k4[:, :, i], v4[:, :, i]
        if g4 is not None:
            state = state * np.exp(g4[:, :, i])[..., None]
        if b4 is not None:
            vt = b4[:, :, i] * (vt - np.einsum("bhdm,bhd->bhm", state, kt))
        state = state + kt[..., :, None] * vt[..., None, :]
        read = np.repeat(state, hq // hkv, axis=1)
        out[:, :, i] = scale * np.einsum("bhd,bhdm->bhm", q4[:, :, i], read)
    y = out.transpose(0, 2, 1, 3).reshape(b, t, hq * dv).astype(q.dtype)
    return y, state.astype(q.dtype if past is None else past.dtype)


linear_attention = define_op(
    "nn.linear_attention", pattern=OPAQUE, inputs=(3, 6), attrs=LinearAttentionAttrs,
    infer=_linear_attention_rel, ref=linear_attention_ref,
    doc="Recurrent linear attention over packed (B, T, H*D) inputs with a (B, H_kv, d_k, d_v) state: "
        "update_rule linear / gated (decay) / delta (beta) / gated_delta; GQA by head repetition. "
        "Outputs (output, present_state); state math is float32.")
