"""te.scan(lanes=True): the states' leading axis holds independent recurrences, each run by its own
time loop inside one parallel loop over the lanes; checked against numpy through the te evaluator
and the tir evaluator."""

from __future__ import annotations

import numpy as np
import pytest

from kiln import te, tir
from kiln.te.eval import evaluate
from kiln.te.scan import scan
from kiln.tir import eval as tir_eval
from kiln.tir.functor import walk

RNG = np.random.default_rng(0)


def _lane_rnn(steps: int, lanes: int, hidden: int):
    """h[l][t + 1] = tanh(h[l][t]·W[l] + x[t, l]), each lane its own weights."""
    x = te.placeholder((steps, lanes, hidden), name="x")
    w = te.placeholder((lanes, hidden, hidden), name="w")
    h0 = te.placeholder((lanes, hidden), name="h0")

    def step(t, lane, h, xs, ws):
        assert h.shape[0].value == 1  # the lane's own state
        k = te.reduce_axis(hidden, "k")
        g = te.compute((1, hidden), lambda d, j: te.sum(h(d, k) * ws(d + lane, k, j), axis=k), name="g")
        return [te.compute((1, hidden), lambda d, j: te.tanh(g(d, j) + xs(t, d + lane, j)), name="h_new")]

    (hist,) = scan([h0], step, steps, [x, w], lanes=True)
    return (h0, x, w), hist


def _ref(h, x, w):
    out = [h]
    for xt in x:
        out.append(np.tanh(np.einsum("lk,lkj->lj", out[-1], w) + xt))
    return np.stack(out)


@pytest.mark.parametrize("steps,lanes,hidden", [(5, 2, 7), (1, 1, 1), (0, 3, 2), (4, 3, 5)])
def test_lanes_match_numpy(steps, lanes, hidden):
    (h0, x, w), hist = _lane_rnn(steps, lanes, hidden)
    h = RNG.standard_normal((lanes, hidden)).astype(np.float32)
    xs = RNG.standard_normal((steps, lanes, hidden)).astype(np.float32)
    ws = (RNG.standard_normal((lanes, hidden, hidden)) * 0.3).astype(np.float32)
    ref = _ref(h, xs, ws)
    np.testing.assert_allclose(evaluate(hist, {h0: h, x: xs, w: ws}), ref, rtol=1e-5, atol=1e-6)
    out = np.full((steps + 1, lanes, hidden), np.nan, np.float32)
    tir_eval.run(te.create_prim_func([hist]), h, xs, ws, out)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


def test_a_parallel_lane_loop_around_one_serial_time_loop_with_its_own_temporaries():
    _, hist = _lane_rnn(6, 2, 5)
    f = te.create_prim_func([hist])
    lane = [s for s in walk(f.body) if isinstance(s, tir.For) and s.loop_var is hist.op.lane]
    assert len(lane) == 1 and lane[0].kind is tir.ForKind.PARALLEL
    inside = list(walk(lane[0].body))
    time = [s for s in inside if isinstance(s, tir.For) and s.loop_var is hist.op.time]
    assert len(time) == 1 and time[0].kind is tir.ForKind.SERIAL
    allocs = [s for s in inside if isinstance(s, tir.Allocate)]
    assert [a.buffer.name for a in allocs] == ["g"]  # per lane: each thread its own
    assert not any(isinstance(s, tir.Allocate) for s in walk(time[0].body))
