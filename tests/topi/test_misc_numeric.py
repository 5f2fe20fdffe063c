"""Compiled (C kernel) runs of the optimizer steps, windows, STFT, training batch norm and dropout, det,
tree ensembles, integer TfIdfVectorizer and run-time broadcasting, against the interpreter."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import kiln
from kiln.compiler.lower import build_graph_executor as build
from kiln.ir.types import ANY
from kiln.op import get_op
from tests.helpers import one_op_module
from tests.topi.cases import CASES
from tests.topi.cases_numeric import tfidf_attrs, tree_attrs, tree_input
from tests.topi.harness import rand

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")
TOL = {"float16": 2e-3, "float32": 2e-5, "float64": 1e-10}



def compiled_vs_interpreter(op: str, attrs, arrays, const=(), any_dims=(), feeds_list=None, exact=False,
                            specialized=False):
    """Build a one-call model (inputs in `const` as constants, those in `any_dims` with run-time dims),
    run it compiled on every feed set and compare with the interpreter; no group may run on the host
    (`specialized`: the group compiles at run time, specialized on its small inputs)."""
    mod = one_op_module(op, arrays, attrs, const, dim=lambda k, ax: ANY if k in any_dims else None)
    cm = build(mod)
    live = [k for k, a in enumerate(arrays) if a is not None and k not in const]
    for arrs in feeds_list or [arrays]:
        feeds = {f"x{k}": arrs[k] for k in live}
        got, want = cm.run(feeds), kiln.evaluate(mod, feeds)
        for g, w in zip(got, want):
            g, w = np.asarray(g), np.asarray(w)
            assert g.shape == w.shape and g.dtype == w.dtype, (op, g.shape, g.dtype, w.shape, w.dtype)
            if exact or w.dtype.kind not in "f":
                np.testing.assert_array_equal(g, w, err_msg=op)
            else:
                tol = TOL[str(w.dtype)]
                np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=tol, atol=tol,
                                           equal_nan=True, err_msg=op)
    assert not cm.ran_on_host, cm.ran_on_host
    assert bool(cm.host_groups) == specialized and bool(cm.specializers) == specialized, cm.host_groups
    return cm


@pytest.mark.parametrize("op", ["train.adagrad", "train.adam", "train.momentum"])
def test_optimizers_compiled(op):
    for attrs, arrays, _ in CASES[op](np.random.default_rng(0)):
        compiled_vs_interpreter(op, attrs, arrays)


def test_momentum_standard_mode_compiled():
    rng = np.random.default_rng(1)
    attrs = get_op("train.momentum").attrs_type(alpha=0.7, beta=0.3, mode="standard", norm_coefficient=0.0)
    for t in (0, 2):
        compiled_vs_interpreter("train.momentum", attrs, [np.array(0.05, np.float32), np.array(t, np.int64),
                                                          rand((1,), "float32", rng), rand((1,), "float32", rng),
                                                          rand((1,), "float32", rng)])


@pytest.mark.parametrize("op,dtypes", [("signal.hann_window", ("float32", "float16")),
                                       ("signal.hamming_window", ("float32", "int32")),
                                       ("signal.blackman_window", ("float32", "float64"))])
def test_windows_with_size_fed_at_run_time(op, dtypes):
    """The size is a graph input: each value compiles a kernel specialized on it (sizes 1, 2 and primes)."""
    for dtype in dtypes:
        for periodic in (0, 1):
            attrs = get_op(op).attrs_type(output_datatype=dtype, periodic=periodic)
            feeds = [[np.array(n, np.int64)] for n in ((1, 2, 7) if dtype == "float32" else (13,))]
            compiled_vs_interpreter(op, attrs, feeds[0], feeds_list=feeds, specialized=True)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_stft_compiled(dtype):
    rng = np.random.default_rng(2)
    op = get_op("signal.stft")
    x = rand((2, 31, 2), dtype, rng)
    compiled_vs_interpreter("signal.stft", op.attrs_type(), [x, np.array(5, np.int64), None, np.array(8, np.int64)],
                            const=(1, 3))
    compiled_vs_interpreter("signal.stft", op.attrs_type(onesided=0),
                            [x[..., :1].copy(), np.array(3, np.int64), rand((7,), dtype, rng)], const=(1,))
    # frame_step fed at run time: specialized on its value
    compiled_vs_interpreter("signal.stft", op.attrs_type(), [x, np.array(4, np.int64), rand((9,), dtype, rng)],
                            specialized=True)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 5, 2), (2, 7, 3, 1)])
def test_batch_norm_training_compiled(dtype, shape):
    rng = np.random.default_rng(3)
    c = shape[1]
    attrs = get_op("nn.batch_normalization").attrs_type(epsilon=1e-3, momentum=0.8, training_mode=1)
    arrays = [rand(shape, dtype, rng), rand((c,), dtype, rng), rand((c,), dtype, rng), rand((c,), dtype, rng),
              np.abs(rand((c,), dtype, rng))]
    compiled_vs_interpreter("nn.batch_normalization", attrs, arrays)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_det_compiled(dtype):
    rng = np.random.default_rng(4)
    for shape in ((1, 1), (3, 3), (2, 5, 5), (4, 2, 2)):
        x = rand(shape, dtype, rng) / 3
        compiled_vs_interpreter("linalg.det", None, [x])
    singular = np.array([[1, 2, 3], [2, 4, 6], [0, 1, 5]], dtype)
    compiled_vs_interpreter("linalg.det", None, [singular])


@pytest.mark.parametrize("dtype,combos", [("float32", ((0, 0), (1, 1), (2, 2), (3, 3))),
                                          ("float64", ((1, 3), (2, 0), (3, 2), (0, 1)))])
def test_tree_ensemble_compiled(dtype, combos):
    """(aggregate_function, post_transform) pairs; test_computes evaluates every pair through te eval."""
    rng = np.random.default_rng(5)
    for agg, post in combos:
        compiled_vs_interpreter("ml.tree_ensemble", tree_attrs(agg, post), [tree_input(rng, dtype, 11)])


def test_tree_ensemble_probit_runs_on_host():
    from kiln.topi import ComputeError
    from tests.topi.harness import run_compute

    with pytest.raises(ComputeError, match="PROBIT"):
        run_compute("ml.tree_ensemble", tree_attrs(1, 4), [tree_input(np.random.default_rng(6), "float32")])


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("shape", [(1,), (17,), (3, 11)])
def test_tfidf_compiled(dtype, shape):
    rng = np.random.default_rng(7)
    for mode, w, (lo, hi, skip) in (("TF", None, (1, 1, 0)), ("IDF", (0.5, 1.0, 2.0, 1.5, 3.0, 0.25), (1, 2, 3)),
                                     ("TFIDF", (1, 2, 3, 4, 5, 6), (2, 2, 0)), ("TF", None, (1, 2, 3))):
        compiled_vs_interpreter("string.tf_idf_vectorizer", tfidf_attrs(mode, lo, hi, skip, w),
                                [rand(shape, dtype, rng, 1, 6)])


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("ratio", [None, 0.0, 0.3, 0.75, 1.0])
def test_training_dropout_matches_seeded_reference_exactly(dtype, ratio):
    rng = np.random.default_rng(8)
    attrs = get_op("nn.dropout").attrs_type(seed=12345)
    r = np.array(0.5 if ratio is None else ratio, np.float32)
    for shape in ((1,), (3, 7, 5), (701,)):  # 701 draws pass MT19937's 624-word state refill
        x = rand(shape, dtype, rng)
        compiled_vs_interpreter("nn.dropout", attrs, [x, r, np.array(True)], exact=True)
        compiled_vs_interpreter("nn.dropout", attrs, [x, None, np.array(True)], exact=True)
    compiled_vs_interpreter("nn.dropout", attrs, [x, r, np.array(False)], exact=True)


def test_unseeded_training_dropout_runs_on_host():
    from kiln.topi import ComputeError
    from tests.topi.harness import run_compute

    with pytest.raises(ComputeError, match="seed"):
        run_compute("nn.dropout", get_op("nn.dropout").attrs_type(),
                    [rand((3,), "float32", np.random.default_rng(9)), None, np.array(True)], (2,))


@pytest.mark.parametrize("op", ["math.mul", "math.add", "math.pow", "math.where"])
def test_broadcast_decided_by_the_data(op):
    """Inputs typed with unknown dims: one kernel serves every broadcasting pattern the data brings."""
    rng = np.random.default_rng(10)
    patterns = [((1, 5), (5,)), ((4, 1), (3,)), ((4, 3), (1,)), ((2, 3), (3,)), ((1, 1), (1,)), ((0, 1), (1,)),
                ((7, 1), (1,))]

    def arrays(a, b):
        if op == "math.where":
            return [rng.random(a) < 0.5, rand(b, "float32", rng), rand((1,) * len(a), "float32", rng)]
        x, y = np.abs(rand(a, "float32", rng)) + 0.5, rand(b, "float32", rng)
        return [x, (y / 4).astype(np.float32) if op == "math.pow" else y]

    feeds = [arrays(a, b) for a, b in patterns]
    n = len(feeds[0])
    cm = compiled_vs_interpreter(op, None, feeds[0], any_dims=tuple(range(n)), feeds_list=feeds)
    assert len(cm.kernels) == 1  # compiled ahead of time, once


def test_gather_elements_on_dims_known_at_run_time():
    rng = np.random.default_rng(11)
    attrs = get_op("tensor.gather_elements").attrs_type(axis=1)
    feeds = [[rand((3, 5), "float32", rng), rng.integers(-5, 5, (3, 4)).astype(np.int64)],
             [rand((1, 2), "float32", rng), rng.integers(-2, 2, (1, 7)).astype(np.int64)]]
    compiled_vs_interpreter("tensor.gather_elements", attrs, feeds[0], any_dims=(0, 1), feeds_list=feeds)


def test_training_dropout_with_constant_ratio_and_mode_compiles_ahead_of_time():
    x = rand((4, 9), "float32", np.random.default_rng(12))
    attrs = get_op("nn.dropout").attrs_type(seed=7)
    compiled_vs_interpreter("nn.dropout", attrs, [x, np.array(0.4, np.float32), np.array(True)], const=(1, 2),
                            exact=True)
