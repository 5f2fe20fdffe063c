"""te.scan: recurrences as one serial time loop around the step's loop nests, checked against numpy
through the te evaluator, the tir evaluator and (with gcc) compiled C."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from kiln import te, tir
from kiln.te.eval import evaluate
from kiln.te.scan import ScanOp, scan
from kiln.tir import eval as tir_eval
from kiln.tir.functor import walk

RNG = np.random.default_rng(0)


def rand(*shape):
    return RNG.standard_normal(shape).astype("float32")


def _tanh_rnn(steps, batch: int, hidden: int, schedule=te.create_schedule):
    """h[t + 1] = tanh(h[t]·W + x[t]): a matmul and an activation per step."""
    x = te.placeholder((steps, batch, hidden), name="x")
    w = te.placeholder((hidden, hidden), name="w")
    h0 = te.placeholder((batch, hidden), name="h0")

    def step(t, h, xs, ws):
        k = te.reduce_axis(hidden, "k")
        g = te.compute((batch, hidden), lambda b, j: te.sum(h(b, k) * ws(k, j), axis=k), name="g")
        return [te.compute((batch, hidden), lambda b, j: te.tanh(g(b, j) + xs(t, b, j)), name="h_new")]

    (hist,) = scan([h0], step, steps, [x, w], schedule=schedule)
    return (h0, x, w), hist


def _tanh_rnn_ref(h, x, w):
    out = [h]
    for xt in x:
        out.append(np.tanh(out[-1] @ w + xt))
    return np.stack(out)


@pytest.mark.parametrize("steps,batch,hidden", [(5, 3, 7), (1, 1, 1), (0, 2, 3), (4, 1, 13)])
def test_te_eval_and_tir_eval_match_numpy(steps, batch, hidden):
    (h0, x, w), hist = _tanh_rnn(steps, batch, hidden)
    h, xs, ws = rand(batch, hidden), rand(steps, batch, hidden), rand(hidden, hidden) * 0.3
    ref = _tanh_rnn_ref(h, xs, ws)
    np.testing.assert_allclose(evaluate(hist, {h0: h, x: xs, w: ws}), ref, rtol=1e-5, atol=1e-6)
    f = te.create_prim_func([hist])
    out = np.full((steps + 1, batch, hidden), np.nan, np.float32)
    tir_eval.run(f, h, xs, ws, out)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


def test_one_serial_time_loop_with_temporaries_outside():
    (_, _, _), hist = _tanh_rnn(6, 2, 5)
    f = te.create_prim_func([hist])
    time_loops = [s for s in walk(f.body) if isinstance(s, tir.For) and s.loop_var is hist.op.time]
    assert len(time_loops) == 1 and time_loops[0].kind is tir.ForKind.SERIAL
    inner = {id(x) for x in walk(time_loops[0].body)}
    allocs = [s for s in walk(f.body) if isinstance(s, tir.Allocate)]
    assert [a.buffer.name for a in allocs] == ["g"] and id(allocs[0]) not in inner
    # the step's loop nests (matmul and activation) are inside the time loop
    assert sum(isinstance(s, tir.For) for s in walk(time_loops[0].body)) >= 4


def test_symbolic_steps_and_batch():
    n, b = tir.Var("n"), tir.Var("b")
    (h0, x, w), hist = _tanh_rnn(n, b, 4)
    f = te.create_prim_func([hist])
    assert [p.name for p in f.params if isinstance(p, tir.Var)] == ["b", "n"]
    for steps, batch in ((3, 2), (1, 5)):
        h, xs, ws = rand(batch, 4), rand(steps, batch, 4), rand(4, 4)
        out = np.full((steps + 1, batch, 4), np.nan, np.float32)
        tir_eval.run(f, h, xs, ws, out, batch, steps)
        np.testing.assert_allclose(out, _tanh_rnn_ref(h, xs, ws), rtol=1e-5, atol=1e-6)
        got = evaluate(hist, {h0: h, x: xs, w: ws}, {n: steps, b: batch})
        np.testing.assert_allclose(got, out, rtol=1e-5, atol=1e-6)


def test_two_states_and_a_new_state_read_by_another():
    """Fibonacci-like pair: a' = a + b, b' = a' * 0.5 (b' reads the new a, not the old)."""
    a0, b0 = te.placeholder((3,), name="a0"), te.placeholder((3,), name="b0")

    def step(t, a, b):
        an = te.compute((3,), lambda i: a(i) + b(i), name="an")
        return [an, te.compute((3,), lambda i: an(i) * 0.5, name="bn")]

    ha, hb = scan([a0, b0], step, 4)
    a, b = rand(3), rand(3)
    ra, rb = [a], [b]
    for _ in range(4):
        ra.append(ra[-1] + rb[-1])
        rb.append(ra[-1] * 0.5)
    got = evaluate([ha, hb], {a0: a, b0: b})
    f = te.create_prim_func([ha, hb])
    outs = [np.full((5, 3), np.nan, np.float32) for _ in range(2)]
    tir_eval.run(f, a, b, *outs)
    for g, o, r in zip(got, outs, (np.stack(ra), np.stack(rb))):
        np.testing.assert_allclose(g, r, rtol=1e-6)
        np.testing.assert_allclose(o, r, rtol=1e-6)


def test_step_returning_a_state_unchanged_still_stores_it():
    s0 = te.placeholder((2,), name="s0")
    (hist,) = scan([s0], lambda t, s: [s], 3)
    v = rand(2)
    np.testing.assert_array_equal(evaluate(hist, {s0: v}), np.stack([v] * 4))
    out = np.full((4, 2), np.nan, np.float32)
    tir_eval.run(te.create_prim_func([hist]), v, out)
    np.testing.assert_array_equal(out, np.stack([v] * 4))


def test_consumers_read_the_history():
    """A compute after the scan (the last state, doubled) lowers into the same function."""
    (h0, x, w), hist = _tanh_rnn(3, 2, 3)
    last = te.compute((2, 3), lambda b, j: hist(3, b, j) * 2.0, name="last")
    h, xs, ws = rand(2, 3), rand(3, 2, 3), rand(3, 3)
    out = np.full((2, 3), np.nan, np.float32)
    tir_eval.run(te.create_prim_func([last]), h, xs, ws, out)
    np.testing.assert_allclose(out, _tanh_rnn_ref(h, xs, ws)[3] * 2, rtol=1e-5, atol=1e-6)


def test_bad_steps_are_rejected():
    s0 = te.placeholder((2,), name="s0")
    with pytest.raises(ValueError, match="returned 2 states"):
        scan([s0], lambda t, s: [s, s], 3)
    with pytest.raises(ValueError, match="new state 0"):
        scan([s0], lambda t, s: [te.compute((3,), lambda i: s(0))], 3)
    with pytest.raises(ValueError, match="new state 0"):
        scan([s0], lambda t, s: [te.compute((2,), lambda i: tir.cast("float64", s(i)))], 3)


def test_scan_is_an_extern_whose_inputs_schedules_keep():
    (h0, x, w), hist = _tanh_rnn(2, 2, 2)
    assert isinstance(hist.op, ScanOp) and isinstance(hist.op, te.ExternOp)
    assert list(hist.op.inputs) == [h0, x, w]
    assert hist.shape[0] == tir.IntImm(3)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")
def test_compiled_scan_with_a_scheduled_step(tmp_path):
    from kiln.codegen import CompileCache, build_library
    from kiln.tir.transform import lower_passes

    def schedule(outs):
        s = te.create_schedule(outs)
        st = next(st for st in s.stages if isinstance(st.op, te.ComputeOp) and st.op.reduce_axis)  # the matmul
        b, j = st.op.axis
        st.reorder(b, *st.op.reduce_axis, j)
        st.vectorize(j)
        return s

    (h0, x, w), hist = _tanh_rnn(9, 3, 17, schedule)
    f = lower_passes(te.create_prim_func([hist], "rnn"), skip=("storage_flatten", "vectorize"))
    fn = build_library([f], "scan", cache=CompileCache(tmp_path)).get_function("rnn")
    h, xs, ws = rand(3, 17), rand(9, 3, 17), rand(17, 17) * 0.3
    out = np.full((10, 3, 17), np.nan, np.float32)
    fn(h, xs, ws, out)
    np.testing.assert_allclose(out, _tanh_rnn_ref(h, xs, ws), rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")
def test_two_chained_scans_in_one_compiled_function(tmp_path):
    """The second recurrence reads the first's history: names and loop variables of the two steps
    (the same step graph twice) must not clash in C."""
    from kiln.codegen import CompileCache, build_library
    from kiln.tir.transform import lower_passes

    (h0, x, w), first = _tanh_rnn(4, 2, 3)

    def step(t, h, xs, ws):
        k = te.reduce_axis(3, "k")
        g = te.compute((2, 3), lambda b, j: te.sum(h(b, k) * ws(k, j), axis=k), name="g")
        return [te.compute((2, 3), lambda b, j: te.tanh(g(b, j) + xs(t + 1, b, j)), name="h_new")]

    (second,) = scan([h0], step, 4, [first, w], name="scan2")
    f = lower_passes(te.create_prim_func([second], "two"), skip=("storage_flatten", "vectorize"))
    fn = build_library([f], "scan2", cache=CompileCache(tmp_path)).get_function("two")
    h, xs, ws = rand(2, 3), rand(4, 2, 3), rand(3, 3)
    out = np.full((5, 2, 3), np.nan, np.float32)
    fn(h, xs, ws, out)
    np.testing.assert_allclose(out, _tanh_rnn_ref(h, _tanh_rnn_ref(h, xs, ws)[1:], ws), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(evaluate(second, {h0: h, x: xs, w: ws}), out, rtol=1e-4, atol=1e-5)
