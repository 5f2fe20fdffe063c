"""Kiln threading's code generation (kiln.codegen.c_launch): the outermost parallel loop becomes a task
launched into the pool, with the same results as OpenMP's, a grain from the estimated work, RESUMABLE
only where skipping finished chunks is safe, and a failed or preempted launch stopping the kernel."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from kiln.codegen import KernelError, generate, pool_library
from kiln.codegen.c_rules import POOL_RULES
from kiln.target import Target
from kiln.tir import Allocate, Buffer, BufferStore, Call, Cast, For, ForKind, IntImm, PrimFunc, Var, seq

from .conftest import requires_gcc

pytestmark = requires_gcc
KILN = Target.parse("c -threading=kiln")
OPENMP = Target.parse("c -threading=openmp")
rng = np.random.default_rng(0)


def loop(i, n, body, kind=ForKind.SERIAL, **ann):
    return For(i, IntImm(0), n if not isinstance(n, int) else IntImm(n), kind, body, tuple(ann.items()))


def launch_lines(fn: PrimFunc) -> list[str]:
    return [ln.strip() for ln in generate([fn], POOL_RULES).code.splitlines() if "= kiln_parallel_launch(" in ln]


class bound:
    """The calling thread's launches run on cores [0, cores) of the pool."""

    def __init__(self, cores: int):
        self.pool = pool_library.load()
        self.cores = cores

    def __enter__(self):
        self.run = self.pool.kiln_run_new()
        self.pool.kiln_run_begin(self.run, 0, self.cores)
        return self.run

    def __exit__(self, *exc):
        self.pool.kiln_run_end()
        self.pool.kiln_run_free(self.run)


def _nest() -> PrimFunc:
    i, j, k = Var("i"), Var("j"), Var("k")
    A = Buffer("A", (IntImm(4), IntImm(4), IntImm(8)), "int32")
    store = BufferStore(A, Cast("int32", i * 100 + j * 10 + k), (i, j, k))
    inner = loop(k, 8, store, ForKind.SERIAL, simd=True)
    return PrimFunc("nest", (A,), loop(i, 4, loop(j, 4, inner, ForKind.PARALLEL), ForKind.PARALLEL))


@pytest.mark.parametrize("cores", [None, 1, 2])
def test_the_outermost_parallel_loop_launches_and_inner_ones_stay_serial(compile_fn, cores):
    fn = _nest()
    src = generate([fn], POOL_RULES).code
    assert "omp parallel" not in src and src.count("#pragma omp simd") == 1
    assert len(launch_lines(fn)) == 1
    a = np.zeros((4, 4, 8), np.int32)
    f = compile_fn(fn, target=KILN)
    if cores is None:
        f(a)
    else:
        with bound(cores):
            f(a)
    np.testing.assert_array_equal(a, np.add.outer(np.add.outer(np.arange(4) * 100, np.arange(4) * 10), np.arange(8)))


def _big_rows(m: int, n: int, local_scratch: bool) -> PrimFunc:
    """out[i, :] = 2 * x[i, :] + i, through a scratch row allocated per iteration (or, with
    `local_scratch` False, written straight into the output)."""
    i, j = Var("i"), Var("j")
    X, Y = Buffer("X", (IntImm(m), IntImm(n)), "float32"), Buffer("Y", (IntImm(m), IntImm(n)), "float32")
    if local_scratch:
        S = Buffer("S", (IntImm(n),), "float32", scope="local")
        body = Allocate(S, seq(loop(j, n, BufferStore(S, X[i, j] * 2.0, (j,))),
                               loop(j, n, BufferStore(Y, S[j] + Cast("float32", i), (i, j)))))
    else:
        body = loop(j, n, BufferStore(Y, X[i, j] * 2.0 + Cast("float32", i), (i, j)))
    return PrimFunc("rows", (X, Y), loop(i, m, body, ForKind.PARALLEL), (("noalias", True),))


@pytest.mark.parametrize("local_scratch", [False, True])
def test_results_match_openmp_on_any_partition(compile_fn, local_scratch):
    fn = _big_rows(301, 700, local_scratch)
    x = rng.random((301, 700), np.float32)
    want = np.empty_like(x)
    compile_fn(fn, target=OPENMP)(x, want)
    f = compile_fn(fn, target=KILN)
    for cores in (1, 2, 4):
        got = np.zeros_like(x)
        with bound(cores):
            f(x, got)
        np.testing.assert_array_equal(got, want)


def test_grain_follows_the_work_per_iteration():
    small, big = launch_lines(_big_rows(4, 8, False)), launch_lines(_big_rows(10_000, 4096, False))
    assert small[0].endswith(", 0LL, 1);")  # a small launch is split statically
    grain = int(big[0].split(", ")[-2].removesuffix("LL"))
    assert 1 <= grain < 10_000 and 10_000 // grain >= 4  # a big one in many chunks of a few rows each


def test_resumable_only_where_finished_chunks_may_be_skipped():
    """Parameters and per-iteration scratch: resumable. A loop writing a parameter another statement of
    the kernel also writes, or a temporary that outlives the loop: not."""
    assert launch_lines(_big_rows(301, 700, True))[0].endswith(", 1);")
    n, i = Var("n"), Var("i")
    A, B = Buffer("A", (n,), "float32"), Buffer("B", (n,), "float32")
    T = Buffer("T", (n,), "float32", scope="local")
    twice = PrimFunc("twice", (A, B, n), seq(loop(i, n, BufferStore(B, A[i], (i,)), ForKind.PARALLEL),
                                            loop(i, n, BufferStore(B, B[i] * 2.0, (i,)), ForKind.PARALLEL)))
    assert [ln.endswith(", 0);") for ln in launch_lines(twice)] == [True, True]
    temp = PrimFunc("temp", (A, B, n), Allocate(T, seq(loop(i, n, BufferStore(T, A[i] + 1.0, (i,)), ForKind.PARALLEL),
                                                      loop(i, n, BufferStore(B, T[i], (i,)), ForKind.PARALLEL))))
    flags = [ln.endswith(", 1);") for ln in launch_lines(temp)]
    assert flags == [False, True]


def _gather_through_temp() -> PrimFunc:
    """B[i] = A[idx[i]] through a heap temporary the launch writes: a bad index fails inside a task."""
    n, i = Var("n"), Var("i")
    A, B = Buffer("A", (n,), "float32"), Buffer("B", (n,), "float32")
    idx = Buffer("idx", (n,), "int64")
    T = Buffer("T", (n,), "float32", scope="local")
    gather = BufferStore(T, A[Call("int64", "check_index", (idx[i], n))], (i,))
    return PrimFunc("gather", (A, idx, B, n), Allocate(T, seq(loop(i, n, gather, ForKind.PARALLEL),
                                                             loop(i, n, BufferStore(B, T[i], (i,))))))


def test_an_error_in_a_task_stops_the_kernel_through_its_frees(compile_fn):
    fn = _gather_through_temp()
    src = generate([fn], POOL_RULES).code
    assert "goto kiln_free_T" in src and "kiln_free_T: free(T);" in src and "goto kiln_exit" in src
    f = compile_fn(fn, target=KILN)
    a, b = rng.random(5000, np.float32), np.zeros(5000, np.float32)
    idx = rng.integers(0, 5000, 5000)
    with bound(2):
        f(a, idx, b, 5000)
        np.testing.assert_array_equal(b, a[idx])
        idx[4321] = 5000
        with pytest.raises(KernelError, match="index is out of range"):
            f(a, idx, b, 5000)


def test_a_cancelled_run_stops_the_kernel_before_any_chunk(compile_fn):
    f = compile_fn(_gather_through_temp(), target=KILN)
    a, idx = rng.random(100, np.float32), np.arange(100)[::-1].copy()
    b = np.zeros(100, np.float32)
    pool = pool_library.load()
    with bound(2) as run:
        pool.kiln_run_cancel(ctypes.c_void_p(run))
        with pytest.raises(KernelError, match="error code 1"):  # KILN_PREEMPTED
            f(a, idx, b, 100)
        assert not b.any()
    with bound(2):
        f(a, idx, b, 100)
    np.testing.assert_array_equal(b, a[::-1])
