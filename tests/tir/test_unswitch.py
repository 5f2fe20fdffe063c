"""unswitch: a vectorized/simd loop whose stores select on a loop-invariant condition (a concat in
NCHWc) becomes one loop per side under an if; other selects stay; meaning is kept (tir evaluator)."""

from __future__ import annotations

import sys

import numpy as np

from kiln import tir
from kiln.tir import BufferStore, For, IfThenElse, PrimFunc, Var
from kiln.tir import expr as E
from kiln.tir.functor import walk
from kiln.tir.transform import lower_passes, unswitch
from tests.tir.nests import NESTS, P, S, U, V, buf, loop
from tests.tir.test_passes import same_meaning


def concat3(kind=V) -> PrimFunc:
    """out[c, j] = a[c, j] (c < 2), b[c - 2, j] (c < 5), d[c - 5, j]: a chain of selects on c (the
    indices are clamped because the tir evaluator computes both sides of a select)."""
    a, b, d, out = buf("a", 2, 8), buf("b", 3, 8), buf("d", 1, 8), buf("out", 6, 8)
    c, j = Var("c"), Var("j")
    lo, hi = tir.const(0), lambda n: tir.const(n)
    value = tir.select(c < 2, a[tir.min_(c, hi(1)), j],
                       tir.select(c < 5, b[tir.min_(tir.max_(c - 2, lo), hi(2)), j], d[tir.max_(c - 5, lo), j])) * 2.0
    return PrimFunc("concat3", (a, b, d, out), loop(c, 6, loop(j, 8, BufferStore(out, value, (c, j)), kind), P))


def lane_select() -> PrimFunc:
    """A select on the loop variable itself (a pad's edge): stays a select."""
    a, out = buf("a", 4, 8), buf("out", 4, 8)
    c, j = Var("c"), Var("j")
    value = tir.select(j < 3, a[c, j], tir.const(0.0, "float32"))
    return PrimFunc("lane_select", (a, out), loop(c, 4, loop(j, 8, BufferStore(out, value, (c, j)), V)))


def load_cond() -> PrimFunc:
    """A condition that reads a buffer may change with the loop's own stores: left alone."""
    a, m, out = buf("a", 4, 8), buf("m", 4), buf("out", 4, 8)
    c, j = Var("c"), Var("j")
    value = tir.select(m[c] > 0.0, a[c, j], tir.const(1.0, "float32"))
    return PrimFunc("load_cond", (a, m, out), loop(c, 4, loop(j, 8, BufferStore(out, value, (c, j)), V)))


def let_cond() -> PrimFunc:
    """A condition on a variable bound inside the stored value cannot leave the loop."""
    a, out = buf("a", 4, 8), buf("out", 4, 8)
    c, j = Var("c"), Var("j")
    t = Var("t", "int64")
    value = E.Let(t, c * 2, tir.select(t < 3, a[c, j], tir.const(1.0, "float32")))
    return PrimFunc("let_cond", (a, out), loop(c, 4, loop(j, 8, BufferStore(out, value, (c, j)), V)))


def _selects(f: PrimFunc) -> int:
    return sum(isinstance(x, E.Select) for x in walk(f.body))


def test_concat_chain_becomes_one_loop_per_input():
    for kind in (V, S):
        f = concat3(kind)
        if kind is S:  # a loop the vectorize pass left scalar carries ("simd", True)
            inner = f.body.body
            f = PrimFunc(f.name, f.params, For(f.body.loop_var, f.body.min, f.body.extent, f.body.kind,
                                               For(inner.loop_var, inner.min, inner.extent, S, inner.body,
                                                   (("simd", True),))))
        g = unswitch(f)
        assert _selects(g) == 0
        assert sum(isinstance(x, IfThenElse) for x in walk(g.body)) == 2
        assert sum(isinstance(x, For) and x.loop_var.name == "j" for x in walk(g.body)) == 3
        same_meaning(f, g)


def test_selects_that_may_change_inside_the_loop_stay():
    for make in (lane_select, load_cond, let_cond):
        f = make()
        g = unswitch(f)
        assert g.body == f.body
        same_meaning(f, g)


def test_plain_serial_loops_are_left_alone():
    f = concat3(S)  # serial without the simd mark: not a vector loop
    assert unswitch(f).body == f.body


def test_every_nest_keeps_meaning_through_the_pipeline():
    for name, make in {**NESTS, "concat3": concat3}.items():
        f = make()
        same_meaning(f, lower_passes(f), seed=len(name))


def test_compiled_concat_after_upsample_matches_the_interpreter():
    from onnx import helper, numpy_helper

    import kiln
    from kiln.op.interpreter import evaluate
    from tests.helpers import F, model

    rng = np.random.default_rng(5)
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["u"], mode="linear"),
             helper.make_node("Concat", ["u", "skip"], ["y"], axis=1)]
    m = model(nodes, [("x", F, [1, 16, 5, 7]), ("skip", F, [1, 8, 10, 14])], [("y", F, [1, 24, 10, 14])], [scales])
    mod = kiln.from_onnx(m)
    feeds = {"x": rng.standard_normal((1, 16, 5, 7)).astype(np.float32),
             "skip": rng.standard_normal((1, 8, 10, 14)).astype(np.float32)}
    got = kiln.InferenceSession(kiln.build(mod, opt_level=3), threads=1).run(None, feeds)[0]
    np.testing.assert_allclose(got, evaluate(mod, feeds)[0], rtol=1e-6, atol=1e-6)



def test_a_constant_condition_is_decided_without_versions():
    """A condition that folds to a constant (an unrolled index substituted: `0 * 4 + 0 == 0`) picks its side
    in place: no if, no second copy of the loop for simplify to drop (the lowering's time on Winograd's
    unrolled transforms)."""
    a, out = buf("a", 4, 8), buf("out", 4, 8)
    c, j = Var("c"), Var("j")
    zero = tir.const(0)
    value = tir.select(E.EQ(zero * 4 + zero, zero), a[c, j], tir.const(1.0, "float32"))
    f = PrimFunc("const_cond", (a, out), loop(c, 4, loop(j, 8, BufferStore(out, value, (c, j)), V)))
    g = unswitch(f)
    assert not any(isinstance(x, IfThenElse) for x in walk(g.body)) and _selects(g) == 0
    same_meaning(f, g)


def test_an_unrolled_select_chain_reaches_unswitch_decided(monkeypatch):
    """An unrolled tile that picks its value by a select chain on the unrolled index (Winograd's transforms)
    is simplified before unswitch: unswitch rewrites no loop body for it. Deciding each of those selects by
    copying the whole body was 13 of resnet50's 20 s of lowering."""
    unswitch_module = sys.modules["kiln.tir.transform.unswitch"]  # the package re-exports the pass by this name
    a, out = buf("a", 4, 8), buf("out", 4, 8)
    t, j = Var("t"), Var("j")
    value = a[t, j]
    for k in range(2, -1, -1):
        value = tir.select(E.EQ(t, tir.const(k)), a[t, j] * float(k + 2), value)
    f = PrimFunc("chain", (a, out), loop(t, 4, loop(j, 8, BufferStore(out, value, (t, j)), V), U))
    decided = []
    real = unswitch_module._decide
    monkeypatch.setattr(unswitch_module, "_decide", lambda *args: decided.append(1) or real(*args))
    g = lower_passes(f)
    assert not decided and _selects(g) == 0
    same_meaning(f, g)
