"""Computes for negative_log_likelihood_loss and softmax_cross_entropy_loss: every reduction,
weights, ignore_index, index and float dtypes and ranks against the references through
kiln.te.eval, then compiled end to end by the executor (no host groups) against kiln.evaluate."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.ir import Function, IRModule, Tuple, TupleGetItem, Var
from kiln.ir.dtype import from_numpy
from kiln.ir.types import SizeVar, TensorType
from kiln.op import get_op
from tests.codegen.conftest import requires_gcc
from tests.topi.cases_loss import LOSSES
from tests.topi.harness import check, rand

SHAPES = ((3, 5), (2, 4, 3), (2, 3, 2, 1, 3))


def _inputs(shape, dtype, index_dtype, weighted, ignore, seed=0):
    rng = np.random.default_rng(seed)
    n, c, *d = shape
    target = rand((n, *d), index_dtype, rng, 0, c - 1)
    if ignore is not None:  # make sure some labels are ignored
        target.reshape(-1)[::3] = ignore
    weight = rand((c,), dtype, rng) if weighted else None
    return [rand(shape, dtype, rng), target, weight]


def _attrs(name, **kw):
    return get_op(name).attrs_type(**kw)


@pytest.mark.parametrize("name", LOSSES)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore", [None, 1, -1])
def test_loss_variants(name, reduction, shape, weighted, ignore):
    check(name, _attrs(name, reduction=reduction, ignore_index=ignore),
          _inputs(shape, "float32", "int64", weighted, ignore))


@pytest.mark.parametrize("name", LOSSES)
@pytest.mark.parametrize("dtype", ["float16", "float64"])
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_loss_dtypes(name, dtype, index_dtype):
    for reduction in ("none", "mean"):
        check(name, _attrs(name, reduction=reduction, ignore_index=2),
              _inputs((3, 4, 2), dtype, index_dtype, True, 2))


@pytest.mark.parametrize("name", LOSSES)
def test_mean_of_all_ignored_is_nan(name):
    x, target, w = _inputs((2, 3), "float32", "int64", True, None)
    target[:] = 1
    check(name, _attrs(name, ignore_index=1), [x, target, w])


def _var(name, a, symbolic=()):
    shape = tuple(SizeVar(f"{name}{k}") if k in symbolic else n for k, n in enumerate(a.shape))
    return Var(name, TensorType(shape, from_numpy(a.dtype)))


@requires_gcc
@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_compiled_losses(reduction):
    from kiln.compiler.lower import build_graph_executor as build

    x, target, w = _inputs((4, 5, 3), "float32", "int64", True, 3)
    vx, vt, vw = _var("x", x), _var("t", target), _var("w", w)
    sce = get_op("reduce.softmax_cross_entropy_loss")(vx, vt, vw, reduction=reduction, ignore_index=3)
    nll = get_op("reduce.negative_log_likelihood_loss")(TupleGetItem(sce, 1), vt, reduction="sum")
    mod = IRModule({"main": Function((vx, vt, vw), Tuple([TupleGetItem(sce, 0), TupleGetItem(sce, 1), nll]))})
    cm = build(mod)
    assert cm.host_groups == [], cm.host_groups
    feeds = {"x": x, "t": target, "w": w}
    for g, r in zip(cm.run(feeds), kiln.evaluate(mod, feeds)):
        assert g.shape == r.shape and g.dtype == r.dtype
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5)
