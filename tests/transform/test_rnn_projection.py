"""split-rnn-projection: RNN/GRU/LSTM with constant weights run as one packed GEMM for X·W^T (all steps,
all directions) and a recurrence-only op (nn.*_recurrence) whose step reads the precomputed gates; a
bidirectional recurrence runs each direction's time loop as its own scan lane (a parallel loop).

Compiled results are checked against the full op's numpy reference over directions, layouts, biases
(GRU linear_before_reset keeps part of Rb in the recurrence), sequence_lens, initial states, peepholes,
float64, and odd sizes (hidden 1 and primes, so the R^T panels are zero-padded)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import kiln
from kiln import tir
from kiln.errors import TypeInferenceError
from kiln.ir import Constant, Function, IRModule, TensorType, Var
from kiln.ir.expr import Call
from kiln.ir.visitor import post_order
from kiln.op import get_op
from kiln.tir.functor import walk
from kiln.transform import PASSES, PassContext
from kiln.transform.pipeline import optimize
from kiln.transform.rnn_projection import pack_panels
from tests.topi.harness import RTOL
from tests.topi.test_rnn_compiled import _arrays, _module

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")


def _ops(mod: IRModule) -> list[str]:
    return [e.op.name for e in post_order(mod.main) if isinstance(e, Call) and hasattr(e.op, "name")]


def _check(op: str, attrs: dict, arrays) -> IRModule:
    mod = _module(op, attrs, arrays)
    cm = kiln.build(mod, opt_level=3)
    feeds = {p.name: arrays[int(p.name[2:])] for p in mod.main.params}
    got = cm.run(feeds)
    want = get_op(op).reference(mod.main.body.attrs, *arrays)
    for k, (g, w) in enumerate(zip(got, want)):
        tol = RTOL[str(w.dtype)]
        assert g.shape == w.shape and g.dtype == w.dtype, (k, g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=f"{op} output {k} {attrs}")
    return mod


# (op, direction, layout, bias, lens, init, peep, extra attrs, dtype, (seq, batch, input, hidden))
CASES = [
    ("nn.lstm", "bidirectional", 0, True, False, False, False, {}, "float32", (9, 1, 16, 8)),  # the audio shape, small
    ("nn.lstm", "forward", 1, True, True, True, True, {}, "float32", (7, 3, 5, 13)),
    ("nn.lstm", "reverse", 0, False, True, True, False, dict(input_forget=1, clip=1.5), "float64", (5, 2, 3, 7)),
    ("nn.lstm", "bidirectional", 1, True, True, True, True, dict(activations=("HardSigmoid", "Softsign", "Elu")),
     "float32", (4, 5, 2, 1)),
    ("nn.gru", "bidirectional", 0, True, True, True, False, dict(linear_before_reset=1), "float32", (6, 3, 4, 11)),
    ("nn.gru", "forward", 1, True, False, False, False, {}, "float32", (1, 2, 3, 17)),
    ("nn.gru", "reverse", 0, True, True, True, False, dict(linear_before_reset=1, clip=0.7), "float64", (5, 1, 2, 3)),
    ("nn.gru", "bidirectional", 1, False, False, True, False, {}, "float32", (3, 2, 5, 33)),
    ("nn.rnn", "bidirectional", 0, True, True, False, False, dict(activations=("Relu", "Tanh")), "float32",
     (6, 2, 3, 5)),
    ("nn.rnn", "forward", 0, False, False, True, False, {}, "float32", (2, 1, 1, 1)),
    ("nn.rnn", "reverse", 1, True, True, True, False, {}, "float32", (8, 4, 7, 37)),
    ("nn.lstm", "forward", 0, True, True, True, False, {}, "float32", (3, 11, 4, 9)),  # batch rows: a ragged tile
    ("nn.gru", "bidirectional", 0, True, False, False, False, {}, "float32", (2, 16, 3, 32)),  # two full tiles
    ("nn.lstm", "forward", 1, True, True, False, False, {}, "float32", (3, 2, 4, 300)),  # a team per step
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}-{c[8]}-{k}" for k, c in enumerate(CASES)])
def test_split_matches_full_reference(case):
    op, direction, layout, bias, lens, init, peep, extra, dtype, sizes = case
    nd = 2 if direction == "bidirectional" else 1
    arrays = _arrays(op, sizes, nd, dtype, layout, bias, lens, init, peep, np.random.default_rng(sizes[3]))
    mod = _check(op, dict(direction=direction, layout=layout, **extra), arrays)
    ops = _ops(optimize(mod, opt_level=3))
    assert f"{op}_recurrence" in ops and op not in ops and "linalg.dense_packed" in ops, ops


def test_gru_linear_before_reset_keeps_the_candidate_recurrent_bias():
    arrays = _arrays("nn.gru", (3, 2, 4, 5), 1, "float32", 0, True, False, False, False, np.random.default_rng(1))
    after = PASSES["split-rnn-projection"](_module("nn.gru", dict(linear_before_reset=1), arrays), PassContext(2))
    rec = next(e for e in post_order(after.main) if isinstance(e, Call) and getattr(e.op, "name", "") ==
               "nn.gru_recurrence")
    rb = rec.args[2].data
    np.testing.assert_array_equal(rb[:, :10], 0)  # z and r biases folded into the projection
    np.testing.assert_array_equal(rb[:, 10:], arrays[3][:, 25:])  # the candidate's Rb stays


def test_recurrence_reference_matches_full_reference():
    """The interpreter runs the split module (the recurrence op's numpy reference, panels unpacked)."""
    arrays = _arrays("nn.lstm", (5, 3, 4, 6), 2, "float64", 1, True, True, True, True, np.random.default_rng(2))
    mod = _module("nn.lstm", dict(direction="bidirectional", layout=1), arrays)
    after = PASSES["split-rnn-projection"](mod, PassContext(2, config={"pack_dense.nr": 4}))
    assert "nn.lstm_recurrence" in _ops(after)
    feeds = {p.name: arrays[int(p.name[2:])] for p in mod.main.params}
    got, want = kiln.evaluate(after, feeds), kiln.evaluate(mod, feeds)
    assert len(got) == len(want) == 3
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def test_weights_that_are_not_constants_keep_the_full_op():
    x = Var("x", TensorType((4, 1, 3), "float32"))
    w = Var("w", TensorType((1, 6, 3), "float32"))
    r = Constant(np.zeros((1, 6, 2), np.float32))
    mod = IRModule({"main": Function((x, w), get_op("nn.gru")(x, w, r, hidden_size=2))})
    assert "nn.gru" in _ops(PASSES["split-rnn-projection"](mod, PassContext(2)))


def test_half_precision_keeps_the_full_op():
    arrays = _arrays("nn.rnn", (3, 1, 2, 4), 1, "float16", 0, True, False, False, False, np.random.default_rng(3))
    assert "nn.rnn" in _ops(PASSES["split-rnn-projection"](_module("nn.rnn", {}, arrays), PassContext(2)))


def test_pack_panels_zero_pads_the_last_panel():
    r = np.arange(2 * 5 * 3, dtype=np.float32).reshape(2, 5, 3)
    p = pack_panels(r, 4)
    assert p.shape == (2, 2, 3, 4)
    np.testing.assert_array_equal(p.transpose(0, 2, 1, 3).reshape(2, 3, 8)[:, :, :5], r.transpose(0, 2, 1))
    np.testing.assert_array_equal(p[:, 1, :, 1:], 0)


def test_bad_panels_raise_type_error():
    xp = Constant(np.zeros((3, 1, 8), np.float32))
    rt = Constant(np.zeros((1, 3, 2, 4), np.float32))  # 3 panels of 4 for 8 gate rows: one too many
    with pytest.raises(TypeInferenceError, match="panels"):
        get_op("nn.lstm_recurrence")(xp, rt).type  # noqa: B018


def test_a_large_unidirectional_step_runs_its_gate_product_in_parallel():
    from kiln.compiler.fuse import fuse
    from kiln.compiler.lower import lower_groups

    arrays = _arrays("nn.lstm", (2, 1, 3, 300), 1, "float32", 0, True, False, False, False, np.random.default_rng(5))
    kernels, _, _ = lower_groups(fuse(_module("nn.lstm", {}, arrays)))
    loops = [s for k in kernels for s in walk(k.func.body) if isinstance(s, tir.For)]
    (time,) = [s for s in loops if s.loop_var.name == "nn_lstm_recurrence_t"]
    assert any(s.kind is tir.ForKind.PARALLEL for s in walk(time.body) if isinstance(s, tir.For))


def test_bidirectional_recurrence_is_a_parallel_lane_loop_around_the_time_loop():
    from kiln.compiler.fuse import fuse
    from kiln.compiler.lower import lower_groups

    arrays = _arrays("nn.lstm", (6, 2, 3, 16), 2, "float32", 0, True, True, True, True, np.random.default_rng(4))
    kernels, _, host = lower_groups(fuse(_module("nn.lstm", dict(direction="bidirectional"), arrays)))
    assert not host and len(kernels) == 2  # the projection's GEMM and the recurrence
    loops = [s for k in kernels for s in walk(k.func.body) if isinstance(s, tir.For)]
    lane = [s for s in loops if s.loop_var.name == "nn_lstm_recurrence_lane"]
    assert len(lane) == 1 and lane[0].kind is tir.ForKind.PARALLEL
    inside = [s for s in walk(lane[0].body) if isinstance(s, tir.For)]
    time = [s for s in inside if s.loop_var.name == "nn_lstm_recurrence_t"]
    assert len(time) == 1 and time[0].kind is tir.ForKind.SERIAL
    assert not any(s.kind is tir.ForKind.PARALLEL for s in inside)  # no team per step
    assert sum(s.kind is tir.ForKind.VECTORIZED for s in walk(time[0].body) if isinstance(s, tir.For)) >= 3
