"""Schedule primitives: the loop structure they record, their errors, and random schedules
(splits, fuses, reorders, compute_at) that must all lower to the same results."""

import numpy as np
import pytest

from kiln import te, tir
from kiln.tir import eval as tir_eval


def _gemm():
    A, B = te.placeholder((8, 6), name="A"), te.placeholder((6, 5), name="B")
    k = te.reduce_axis(6, "k")
    C = te.compute((8, 5), lambda i, j: te.sum(A(i, k) * B(k, j), axis=k), name="C")
    D = te.compute((8, 5), lambda i, j: C(i, j) + 1.0, name="D")
    return A, B, C, D


def names(ivs):
    return [iv.var.name for iv in ivs]


def test_stages_exclude_placeholders_in_dataflow_order():
    A, B, C, D = _gemm()
    s = te.create_schedule(D)
    assert [st.op.name for st in s.stages] == ["C", "D"]
    assert s[C] is s[C.op] and s[D].op is D.op
    with pytest.raises(KeyError, match="no stage"):
        s[A]


def test_split_tile_fuse_reorder_record_leaves():
    A, B, C, D = _gemm()
    s = te.create_schedule(D)
    st = s[C]
    i, j = st.op.axis
    (k,) = st.op.reduce_axis
    assert names(st.leaf_iter_vars) == ["i", "j", "k"]
    xo, yo, xi, yi = st.tile(i, j, 4, 2)
    assert names(st.leaf_iter_vars) == ["i_outer", "j_outer", "i_inner", "j_inner", "k"]
    assert xo.dom.extent.value == 2 and yo.dom.extent.value == 3 and yi.kind == "data"
    ko, ki = st.split(k, nparts=2)
    assert ko.kind == ki.kind == "reduce" and ki.dom.extent.value == 3
    f = st.fuse(xo, yo)
    assert names(st.leaf_iter_vars) == ["i_outer_j_outer_fused", "i_inner", "j_inner", "k_outer", "k_inner"]
    assert f.dom.extent.value == 6
    st.reorder(ko, xi)
    assert names(st.leaf_iter_vars) == ["i_outer_j_outer_fused", "k_outer", "j_inner", "i_inner", "k_inner"]
    st.parallel(f)
    st.vectorize(yi)
    st.unroll(ki)
    assert st.kinds == {f: tir.ForKind.PARALLEL, yi: tir.ForKind.VECTORIZED, ki: tir.ForKind.UNROLLED}


def test_primitive_errors():
    A, B, C, D = _gemm()
    s = te.create_schedule(D)
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    with pytest.raises(ValueError, match="exactly one"):
        s[C].split(i)
    with pytest.raises(ValueError, match="not consecutive"):
        s[C].fuse(i, k)
    with pytest.raises(ValueError, match="reduction"):
        s[C].fuse(j, k)
    s[C].split(i, 2)
    with pytest.raises(ValueError, match="not a loop"):
        s[C].vectorize(i)
    with pytest.raises(ValueError, match="injective"):
        s[C].compute_inline()
    with pytest.raises(ValueError, match="not a loop"):
        s[C].compute_at(s[D], i)


def test_cache_read_and_write_add_stages():
    A, B, C, D = _gemm()
    s = te.create_schedule(D)
    CL = s.cache_write(C, "local")
    AA = s.cache_read(A, "shared", [CL])
    assert [st.op.name for st in s.stages] == ["A_shared", "C_local", "C", "D"]
    assert s[CL].scope == "local" and s[AA].scope == "shared"
    assert s[C].op is not C.op and s[C] is s[C.op]
    assert CL.op.reduce_axis and not s[C].op.reduce_axis
    with pytest.raises(ValueError, match="unscheduled"):
        s[D].split(s[D].op.axis[0], 2)
        s.cache_write(D, "local")


def _random_schedule(rng, s, stages):
    for st in stages:
        for _ in range(rng.integers(0, 4)):
            leaves = st.leaf_iter_vars
            choice = rng.integers(0, 3)
            if choice == 0:
                iv = leaves[rng.integers(len(leaves))]
                factor = int(rng.choice([1, 2, 3, 4, 5, 8]))
                st.split(iv, factor=factor) if rng.integers(2) else st.split(iv, nparts=factor)
            elif choice == 1 and len(leaves) > 1:
                p = rng.integers(len(leaves) - 1)
                if leaves[p].kind == leaves[p + 1].kind:
                    st.fuse(leaves[p], leaves[p + 1])
            else:
                st.reorder(*rng.permutation(np.array(leaves, dtype=object)))
        kinds = [st.vectorize, st.unroll, st.parallel]
        kinds[rng.integers(3)](st.leaf_iter_vars[rng.integers(len(st.leaf_iter_vars))])


@pytest.mark.parametrize("seed", range(24))
def test_random_schedules_agree_with_numpy(seed):
    rng = np.random.default_rng(seed)
    A, W = te.placeholder((7, 9), name="A"), te.placeholder((3, 5), name="W")
    P = te.compute((7, 9), lambda i, j: A(i, j) * 2.0, name="P")
    r, c = te.reduce_axis(3, "r"), te.reduce_axis(5, "c")
    Q = te.compute((5, 5), lambda i, j: te.sum(P(i + r.var, j + c.var) * W(r, c), axis=[r, c]), name="Q")
    out = te.compute((5, 5), lambda i, j: Q(i, j) + 1.0, name="out")
    s = te.create_schedule(out)
    _random_schedule(rng, s, [s[out], s[Q], s[P]])
    placement = rng.integers(4)
    if placement == 1:
        s[P].compute_inline()
    elif placement >= 2:
        s[P].compute_at(s[Q], s[Q].leaf_iter_vars[rng.integers(len(s[Q].leaf_iter_vars))])
        if placement == 3:
            s[Q].compute_at(s[out], s[out].leaf_iter_vars[rng.integers(len(s[out].leaf_iter_vars))])
    f = te.create_prim_func(s)
    a, w = rng.standard_normal((7, 9)).astype("float32"), rng.standard_normal((3, 5)).astype("float32")
    got = np.full((5, 5), np.nan, "float32")
    tir_eval.run(f, a, w, got)
    p = a * 2
    q = np.array([[np.sum(p[i:i + 3, j:j + 5] * w) for j in range(5)] for i in range(5)])
    np.testing.assert_allclose(got, q + 1.0, rtol=1e-4, atol=1e-5)
