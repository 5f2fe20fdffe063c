"""Lowered PrimFuncs run by the tir evaluator against numpy, default and scheduled."""

import numpy as np
import pytest

from kiln import te, tir
from kiln.tir import eval as tir_eval
from kiln.tir.functor import walk
from kiln.tir.printer import to_str

RNG = np.random.default_rng(0)


def rand(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(dtype)


def run(f, *arrays, out_shapes, out_dtypes=None, scalars=()):
    """Run `f` on `arrays` plus fresh outputs; returns the outputs."""
    outs = [np.full(s, np.nan if d.startswith("float") else -7, d)
            for s, d in zip(out_shapes, out_dtypes or ["float32"] * len(out_shapes))]
    tir_eval.run(f, *arrays, *outs, *scalars)
    return outs[0] if len(outs) == 1 else outs


def nodes(f, cls):
    return [x for x in walk(f.body) if isinstance(x, cls)]


def loops(f):
    return {s.loop_var.name: s for s in nodes(f, tir.For)}


def test_elementwise_and_params():
    A, B = te.placeholder((4, 3), name="A"), te.placeholder((4, 3), name="B")
    C = te.compute((4, 3), lambda i, j: te.exp(A(i, j)) * B(i, j) + 1.0, name="C")
    f = te.create_prim_func([C], "ew")
    assert [p.name for p in f.params] == ["A", "B", "C"]
    a, b = rand(4, 3), rand(4, 3)
    np.testing.assert_allclose(run(f, a, b, out_shapes=[(4, 3)]), np.exp(a) * b + 1, rtol=1e-6)


def test_broadcast_with_size_one_dims():
    A, b = te.placeholder((3, 1, 5), name="A"), te.placeholder((1, 4, 1), name="b")
    C = te.compute((3, 4, 5), lambda i, j, k: A(i, 0, k) + b(0, j, 0), name="C")
    a, bb = rand(3, 1, 5), rand(1, 4, 1)
    np.testing.assert_allclose(run(te.create_prim_func(C), a, bb, out_shapes=[(3, 4, 5)]), a + bb)


@pytest.mark.parametrize("reducer,ref", [(te.sum, np.sum), (te.max, np.max), (te.min, np.min), (te.prod, np.prod)])
def test_reductions(reducer, ref):
    A = te.placeholder((5, 6), name="A")
    k = te.reduce_axis(6, "k")
    B = te.compute((5,), lambda i: reducer(A(i, k), axis=k), name="B")
    a = rand(5, 6)
    np.testing.assert_allclose(run(te.create_prim_func(B), a, out_shapes=[(5,)]), ref(a, axis=1), rtol=1e-5)


def test_reduction_to_scalar_and_where():
    A = te.placeholder((10,), name="A")
    k = te.reduce_axis(10, "k")
    B = te.compute((), lambda: te.sum(A(k), axis=k, where=k > 2), name="B")
    a = rand(10)
    np.testing.assert_allclose(run(te.create_prim_func(B), a, out_shapes=[()]), a[3:].sum(), rtol=1e-5)


def test_argmax_tuple_reducer():
    A = te.placeholder((4, 7), name="A")
    k = te.reduce_axis(7, "k")
    idx, val = te.compute((4,), lambda i: te.argmax((k, A(i, k)), axis=k), name="am")
    f = te.create_prim_func([idx, val])
    a = rand(4, 7)
    a[2, 1] = a[2, 5] = 10.0  # ties take the first index
    got_i, got_v = run(f, a, out_shapes=[(4,), (4,)], out_dtypes=["int64", "float32"])
    np.testing.assert_array_equal(got_i, a.argmax(1))
    np.testing.assert_allclose(got_v, a.max(1))


def matmul(n, m, kk, name="C"):
    A, B = te.placeholder((n, kk), name="A"), te.placeholder((kk, m), name="B")
    k = te.reduce_axis(kk, "k")
    return A, B, te.compute((n, m), lambda i, j: te.sum(A(i, k) * B(k, j), axis=k), name=name)


def _plain(s, C):
    pass


def _split_reorder(s, C):
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    io, ii = s[C].split(i, 4)
    ko, ki = s[C].split(k, nparts=3)
    s[C].reorder(io, ko, j, ii, ki)
    s[C].parallel(io)
    s[C].unroll(ki)


def _tile_vectorize(s, C):
    i, j = s[C].op.axis
    xo, yo, xi, yi = s[C].tile(i, j, 4, 8)
    s[C].parallel(s[C].fuse(xo, yo))
    s[C].vectorize(yi)


def _fuse_then_split(s, C):
    i, j = s[C].op.axis
    fo, fi = s[C].split(s[C].fuse(i, j), 16)
    s[C].parallel(fo)
    s[C].unroll(fi)


def _gemm_cache_write(s, C):
    CL = s.cache_write(C, "local")
    i, j = s[C].op.axis
    xo, yo, xi, yi = s[C].tile(i, j, 4, 4)
    s[C].parallel(xo)
    s[CL].compute_at(s[C], yo)
    ci, cj = s[CL].op.axis
    (k,) = s[CL].op.reduce_axis
    ko, ki = s[CL].split(k, 4)
    s[CL].reorder(ko, ci, ki, cj)
    s[CL].vectorize(cj)
    s[CL].unroll(ki)


@pytest.mark.parametrize("sched", [_plain, _split_reorder, _tile_vectorize, _fuse_then_split, _gemm_cache_write])
@pytest.mark.parametrize("n,m,kk", [(16, 16, 8), (7, 13, 13), (1, 5, 1)])
def test_matmul_schedules(sched, n, m, kk):
    A, B, C = matmul(n, m, kk)
    s = te.create_schedule(C)
    sched(s, C)
    f = te.create_prim_func(s, "mm")
    a, b = rand(n, kk), rand(kk, m)
    np.testing.assert_allclose(run(f, a, b, out_shapes=[(n, m)]), a @ b, rtol=1e-4, atol=1e-5)


def test_schedule_sets_for_kinds_and_cache_is_local():
    A, B, C = matmul(16, 16, 8)
    s = te.create_schedule(C)
    _gemm_cache_write(s, C)
    f = te.create_prim_func(s)
    kinds = {name: lp.kind for name, lp in loops(f).items()}
    assert kinds["i_outer"] is tir.ForKind.PARALLEL
    assert kinds["j"] is tir.ForKind.VECTORIZED and kinds["k_inner"] is tir.ForKind.UNROLLED
    (alloc,) = nodes(f, tir.Allocate)
    assert alloc.buffer.scope == "local" and [d.value for d in alloc.buffer.shape] == [4, 4]


def test_unroll_hint_keeps_the_loop_and_asks_gcc_to_unroll_it():
    """unroll_hint leaves one serial loop in the IR (unroll copies the body) and the C asks gcc to unroll it."""
    from kiln.codegen.c_source import generate
    from kiln.tir.transform import lower_passes

    A, B, C = matmul(6, 8, 12)
    s = te.create_schedule(C)
    (k,) = s[C].op.reduce_axis
    s[C].unroll_hint(k)
    f = lower_passes(te.create_prim_func(s, "mm"))
    (loop,) = [lp for name, lp in loops(f).items() if name == "k"]
    assert loop.kind is tir.ForKind.SERIAL and ("unroll_hint", True) in loop.annotations
    assert "#pragma GCC unroll 12\n" in generate([f]).code
    a, b = rand(6, 12), rand(12, 8)
    np.testing.assert_allclose(run(f, a, b, out_shapes=[(6, 8)]), a @ b, rtol=1e-4, atol=1e-5)


def test_inline_chain():
    A = te.placeholder((6, 5), name="A")
    B = te.compute((6, 5), lambda i, j: A(i, j) * 2.0, name="B")
    C = te.compute((5, 6), lambda i, j: B(j, i) + 1.0, name="C")
    D = te.compute((5, 6), lambda i, j: te.tanh(C(i, j)), name="D")
    s = te.create_schedule(D)
    s[B].compute_inline()
    s[C].compute_inline()
    f = te.create_prim_func(s)
    assert not nodes(f, tir.Allocate) and len(nodes(f, tir.BufferStore)) == 1
    a = rand(6, 5)
    np.testing.assert_allclose(run(f, a, out_shapes=[(5, 6)]), np.tanh(a.T * 2 + 1), rtol=1e-6)


def test_default_intermediates_are_global_allocations():
    A = te.placeholder((3, 8), name="A")
    k = te.reduce_axis(8, "k")
    mx = te.compute((3,), lambda i: te.max(A(i, k), axis=k), name="mx")
    e = te.compute((3, 8), lambda i, j: te.exp(A(i, j) - mx(i)), name="e")
    k2 = te.reduce_axis(8, "k2")
    sm = te.compute((3,), lambda i: te.sum(e(i, k2), axis=k2), name="sm")
    out = te.compute((3, 8), lambda i, j: e(i, j) / sm(i), name="softmax")
    f = te.create_prim_func(out)
    assert {a.buffer.name: a.buffer.scope for a in nodes(f, tir.Allocate)} == {"mx": "global", "e": "global",
                                                                               "sm": "global"}
    a = rand(3, 8)
    ref = np.exp(a - a.max(1, keepdims=True))
    np.testing.assert_allclose(run(f, a, out_shapes=[(3, 8)]), ref / ref.sum(1, keepdims=True), rtol=1e-5)


def conv1d(n, kw):
    A, W = te.placeholder((n,), name="A"), te.placeholder((kw,), name="W")
    # select evaluates both sides: the read is clamped into A
    P = te.compute((n + kw - 1,), lambda i: te.if_then_else((i >= 1) & (i < n + 1),
                                                            A(tir.min_(tir.max_(i - 1, 0), n - 1)), 0.0), name="P")
    r = te.reduce_axis(kw, "r")
    B = te.compute((n,), lambda i: te.sum(P(i + r.var) * W(r), axis=r), name="B")
    return A, W, P, B


def conv1d_ref(a, w):
    p = np.pad(a, (1, len(w) - 2))
    return np.array([p[i:i + len(w)] @ w for i in range(len(p) - len(w) + 1)])


@pytest.mark.parametrize("n,factor", [(16, 4), (13, 4), (7, 3), (5, 8)])
def test_compute_at_infers_stencil_bounds(n, factor):
    A, W, P, B = conv1d(n, 3)
    s = te.create_schedule(B)
    bo, bi = s[B].split(s[B].op.axis[0], factor)
    s[P].compute_at(s[B], bo)
    f = te.create_prim_func(s)
    (alloc,) = nodes(f, tir.Allocate)
    tile = min(factor, B.shape[0].value)
    assert alloc.buffer.scope == "local" and alloc.buffer.shape[0].value == tile + 3 - 1
    a, w = rand(n), rand(3)
    np.testing.assert_allclose(run(f, a, w, out_shapes=[B.shape[0].value]), conv1d_ref(a, w), rtol=1e-5, atol=1e-6)


def test_compute_at_inner_loop_and_reduction_axis():
    A, W, P, B = conv1d(10, 4)
    s = te.create_schedule(B)
    (r,) = s[B].op.reduce_axis
    s[P].compute_at(s[B], r)  # one element of P per (i, r)
    f = te.create_prim_func(s)
    (alloc,) = nodes(f, tir.Allocate)
    assert alloc.buffer.shape[0].value == 1
    a, w = rand(10), rand(4)
    np.testing.assert_allclose(run(f, a, w, out_shapes=[B.shape[0].value]), conv1d_ref(a, w), rtol=1e-5, atol=1e-6)


def test_compute_at_nested_two_levels():
    A = te.placeholder((12, 9), name="A")
    B = te.compute((12, 9), lambda i, j: A(i, j) + 1.0, name="B")
    C = te.compute((12, 9), lambda i, j: B(i, j) * 2.0, name="C")
    D = te.compute((12, 9), lambda i, j: C(i, j) - 3.0, name="D")
    s = te.create_schedule(D)
    xo, yo, xi, yi = s[D].tile(*s[D].op.axis, 5, 4)
    s[C].compute_at(s[D], yo)
    s[B].compute_at(s[C], s[C].op.axis[0])
    f = te.create_prim_func(s)
    shapes = {a.buffer.name: [d.value for d in a.buffer.shape] for a in nodes(f, tir.Allocate)}
    assert shapes == {"C": [5, 4], "B": [1, 4]}
    a = rand(12, 9)
    np.testing.assert_allclose(run(f, a, out_shapes=[(12, 9)]), (a + 1) * 2 - 3, rtol=1e-6)


def test_cache_read_at_reduction_loop():
    A, B, C = matmul(8, 6, 12)
    s = te.create_schedule(C)
    AA = s.cache_read(A, "local", [C])
    (k,) = s[C].op.reduce_axis
    ko, ki = s[C].split(k, 5)
    s[AA].compute_at(s[C], ko)
    f = te.create_prim_func(s)
    (alloc,) = nodes(f, tir.Allocate)
    assert [d.value for d in alloc.buffer.shape] == [1, 5]
    a, b = rand(8, 12), rand(12, 6)
    np.testing.assert_allclose(run(f, a, b, out_shapes=[(8, 6)]), a @ b, rtol=1e-4, atol=1e-5)


def test_symbolic_dims():
    n = tir.Var("n")
    A = te.placeholder((n, 3), name="A")
    B = te.compute((n, 3), lambda i, j: A(i, j) * A(i, j), name="B")
    k = te.reduce_axis(n, "k")
    C = te.compute((3,), lambda j: te.sum(B(k, j), axis=k), name="C")
    s = te.create_schedule(C)
    s[B].compute_inline()
    ko, ki = s[C].split(s[C].op.reduce_axis[0], 4)
    f = te.create_prim_func(s, "sym")
    assert f.params[-1] is n and len(f.params) == 3
    for size in (1, 5, 8):
        a = rand(size, 3)
        np.testing.assert_allclose(run(f, a, out_shapes=[(3,)], scalars=[size]), (a * a).sum(0), rtol=1e-5)


def test_symbolic_dims_with_compute_at():
    n = tir.Var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A(i) + 1.0, name="B")
    C = te.compute((n,), lambda i: B(i) * 3.0, name="C")
    s = te.create_schedule(C)
    co, ci = s[C].split(s[C].op.axis[0], 4)
    s[B].compute_at(s[C], co)
    f = te.create_prim_func(s)
    (alloc,) = nodes(f, tir.Allocate)
    assert alloc.buffer.shape[0].value == 4
    for size in (3, 4, 9):
        a = rand(size)
        np.testing.assert_allclose(run(f, a, out_shapes=[(size,)], scalars=[size]), (a + 1) * 3, rtol=1e-6)


def test_given_inputs_fix_order_and_stop_at_computed_tensors():
    A, B, C = matmul(3, 4, 5)
    D = te.compute((3, 4), lambda i, j: C(i, j) + 1.0, name="D")
    f = te.create_prim_func([D], inputs=[C])
    assert [p.name for p in f.params] == ["C", "D"]
    f = te.create_prim_func([D], inputs=[B, A])
    assert [p.name for p in f.params] == ["B", "A", "D"]
    with pytest.raises(ValueError, match="not among the given inputs"):
        te.create_prim_func([D], inputs=[A])


def test_extern_op_becomes_a_call():
    A = te.placeholder((5,), name="A")
    B = te.compute((5,), lambda i: A(i) + 1.0, name="B")
    op = te.ExternOp("sort", (B,), ((tir.IntImm(5),),), ("float32",), "kiln_sort", (tir.IntImm(1),))
    f = te.create_prim_func([op.output(0)])
    (ev,) = nodes(f, tir.Evaluate)
    assert ev.value.name == "kiln_sort" and [getattr(a, "name", None) for a in ev.value.args[:2]] == ["B", "sort"]
    assert ev.value.args[2] == tir.IntImm(1)


def test_lowering_errors():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A(i) + 1.0, name="B")
    C = te.compute((8,), lambda i: B(i) * 2.0, name="C")
    D = te.compute((8,), lambda i: B(i) - C(i), name="D")
    s = te.create_schedule(D)
    s[B].compute_at(s[C], s[C].op.axis[0])
    with pytest.raises(ValueError, match="outside that loop"):
        te.create_prim_func(s)
    s = te.create_schedule(D)
    s[D].compute_inline()
    with pytest.raises(ValueError, match="output"):
        te.create_prim_func(s)
    k = te.reduce_axis(8)
    E = te.compute((1,), lambda i: te.sum(A(k), axis=k) * 2.0, name="E")
    with pytest.raises(ValueError, match="whole body"):
        te.create_prim_func(E)


def test_printed_guard_for_prime_extent():
    A = te.placeholder((13,), name="A")
    B = te.compute((13,), lambda i: A(i) * 2.0, name="B")
    s = te.create_schedule(B)
    s[B].split(s[B].op.axis[0], 4)
    text = to_str(te.create_prim_func(s))
    assert "for (i_outer, 0, 4)" in text and "if (i_outer * 4 + i_inner < 13)" in text


def test_softmax_rows_computed_at_output_row():
    A = te.placeholder((5, 7), name="A")
    k = te.reduce_axis(7, "k")
    mx = te.compute((5,), lambda i: te.max(A(i, k), axis=k), name="mx")
    e = te.compute((5, 7), lambda i, j: te.exp(A(i, j) - mx(i)), name="e")
    k2 = te.reduce_axis(7, "k2")
    sm = te.compute((5,), lambda i: te.sum(e(i, k2), axis=k2), name="sm")
    out = te.compute((5, 7), lambda i, j: e(i, j) / sm(i), name="softmax")
    s = te.create_schedule(out)
    i = s[out].op.axis[0]
    s[out].parallel(i)
    for t in (mx, e, sm):
        s[t].compute_at(s[out], i)
    f = te.create_prim_func(s)
    shapes = {a.buffer.name: [d.value for d in a.buffer.shape] for a in nodes(f, tir.Allocate)}
    assert shapes == {"mx": [1], "e": [1, 7], "sm": [1]}
    a = rand(5, 7)
    ref = np.exp(a - a.max(1, keepdims=True))
    np.testing.assert_allclose(run(f, a, out_shapes=[(5, 7)]), ref / ref.sum(1, keepdims=True), rtol=1e-5)


def test_reduce_axis_with_offset_and_cached_argmax():
    A = te.placeholder((3, 9), name="A")
    k = te.reduce_axis((2, 5), "k")
    idx, val = te.compute((3,), lambda i: te.argmax((k, A(i, k)), axis=k), name="am")
    s = te.create_schedule([idx, val])
    il, vl = s.cache_write(idx, "local")
    s[il.op].compute_at(s[idx], s[idx].op.axis[0])
    s[il.op].split(s[il.op].op.reduce_axis[0], 2)
    f = te.create_prim_func(s)
    a = rand(3, 9)
    got_i, got_v = run(f, a, out_shapes=[(3,), (3,)], out_dtypes=["int64", "float32"])
    np.testing.assert_array_equal(got_i, a[:, 2:7].argmax(1) + 2)
    np.testing.assert_allclose(got_v, a[:, 2:7].max(1))
