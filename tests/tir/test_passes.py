"""Every tir pass keeps meaning: eval(func) == eval(pass(func)) on hand-built loop nests."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.tir import Buffer, BufferStore, For, ForKind, IfThenElse, IntImm, PrimFunc, Ramp, Var
from kiln.tir.eval import run
from kiln.tir.functor import walk
from kiln.tir.transform import (
    LOWER_PIPELINE,
    loop_partition,
    lower_passes,
    simplify,
    storage_flatten,
    unroll,
    vectorize,
)
from tests.tir import nests


def outputs(func, args):
    args = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    run(func, *args)
    return args


def same_meaning(before, after, seed=0):
    args = nests.make_args(before, np.random.default_rng(seed))
    for x, y in zip(outputs(before, args), outputs(after, args)):
        np.testing.assert_array_equal(x, y)


def nodes(node, cls):
    return [x for x in walk(node.body if isinstance(node, PrimFunc) else node) if isinstance(x, cls)]


PASSES = {"simplify": simplify, "loop_partition": loop_partition, "storage_flatten": storage_flatten,
          "unroll": unroll, "vectorize": vectorize, "lower_passes": lower_passes}


@pytest.mark.parametrize("nest", sorted(nests.NESTS))
@pytest.mark.parametrize("name", sorted(PASSES))
def test_pass_keeps_meaning(nest, name):
    f = nests.NESTS[nest]()
    same_meaning(f, PASSES[name](f))


@pytest.mark.parametrize("nest", sorted(nests.NESTS))
def test_pipeline_prefixes_keep_meaning(nest):
    f = g = nests.NESTS[nest]()
    for p in LOWER_PIPELINE:
        g = p(g)
        same_meaning(f, g)


def test_reference_results():
    f = nests.matmul()
    a, b, c = nests.make_args(f, np.random.default_rng(1))
    run(lower_passes(f), a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_storage_flatten_makes_buffers_1d():
    g = storage_flatten(nests.strided_copy())
    assert all(len(p.shape) == 1 and p.strides is None for p in g.params)
    assert all(len(s.indices) == 1 for s in nodes(g, BufferStore))


def test_loop_partition_splits_off_tail():
    g = simplify(loop_partition(nests.split_guard(100, 8, ForKind.SERIAL, outer=ForKind.SERIAL)))
    main = g.body.stmts[0]
    assert isinstance(main, For) and main.extent.value == 12
    assert not nodes(g, IfThenElse)  # the tail's guard is decided once its loops are split too


def test_loop_partition_keeps_a_parallel_tail_in_the_team():
    """A parallel loop keeps its tail as its last iteration, behind a branch on the loop variable, so
    that the team shares it instead of one thread running it after the loop."""
    f = nests.split_guard(100, 8, ForKind.SERIAL)
    g = simplify(loop_partition(f))
    assert isinstance(g.body, For) and g.body.kind == ForKind.PARALLEL and g.body.extent.value == 13
    branch = g.body.body
    assert isinstance(branch, IfThenElse) and str(branch.cond) == "io < 12"
    assert nodes(g, IfThenElse) == [branch]  # the main part's guard is gone, the tail's inner loop stops at 4
    same_meaning(f, g)


def test_loop_partition_symbolic_length():
    f = nests.split_guard_symbolic()
    g = lower_passes(f)
    assert not nodes(g, IfThenElse)  # the tail's inner loop stops where the guard would fail
    for n in (0, 1, 3, 4, 9, 16):
        args = nests.make_args(f, np.random.default_rng(n), n)
        for x, y in zip(outputs(f, args), outputs(g, args)):
            np.testing.assert_array_equal(x, y)


def test_unroll_removes_loops():
    g = unroll(nests.strided_copy())
    assert not any(x.kind is ForKind.UNROLLED for x in nodes(g, For))
    assert len(nodes(g, BufferStore)) == 6


def test_vectorize_contiguous_becomes_ramps():
    g = lower_passes(nests.copy2d())
    assert not any(x.kind is ForKind.VECTORIZED for x in nodes(g, For))
    store, = nodes(g, BufferStore)
    assert isinstance(store.indices[0], Ramp) and store.value.dtype == "float32x16"


@pytest.mark.parametrize("nest", ["transpose", "row_sum_local"])
def test_vectorize_falls_back_to_simd(nest):
    g = lower_passes(nests.NESTS[nest]())
    assert not nodes(g, Ramp)
    assert any(dict(x.annotations).get("simd") for x in nodes(g, For))


def test_vectorize_refuses_loop_carried_dependence():
    A = Buffer("A", (IntImm(9),), "float32")
    i = Var("i")
    f = PrimFunc("shift", (A,), For(i, IntImm(0), IntImm(8), ForKind.VECTORIZED,
                                     BufferStore(A, A[i] + 1.0, (i + 1,))))
    g = vectorize(f)
    assert dict(g.body.annotations).get("simd")
    same_meaning(f, g)


def test_simplify_removes_trivial_loops_and_decided_ifs():
    g = simplify(nests.trivial_loops())
    assert not nodes(g, IfThenElse)
    assert [x.extent.value for x in nodes(g, For)] == [4]


def test_vectorize_selects_casts_intrinsics():
    g = lower_passes(nests.vector_ops())
    store, = nodes(g, BufferStore)
    assert isinstance(store.indices[0], Ramp) and store.value.dtype == "float32x8"
