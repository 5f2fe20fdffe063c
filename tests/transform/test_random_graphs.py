"""Differential tests: every pass and every standard pipeline keeps the meaning of random graphs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kiln
from kiln.transform import PASSES, PassContext, WellFormedCheck
from kiln.transform.pipeline import optimize
from tests.random_graphs import random_module

# passes that need configuration or change numerics by design are covered by their own tests
SKIP = {"to-mixed-precision", "fast-math"}


def _run_same(mod, out, feeds) -> None:
    with np.errstate(all="ignore"):
        want = kiln.evaluate(mod, feeds)
        got = kiln.evaluate(out, feeds)
    assert len(want) == len(got)
    for w, g in zip(want, got):
        assert w.shape == g.shape and w.dtype == g.dtype
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", sorted(set(PASSES) - SKIP))
@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_pass_keeps_meaning(name: str, seed: int) -> None:
    mod, feeds = random_module(seed)
    with PassContext(opt_level=3, instruments=[WellFormedCheck()]) as ctx:
        out = PASSES[name](mod, ctx)
    _run_same(mod, out, feeds)


@pytest.mark.parametrize("opt_level", [0, 1, 2, 3])
@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_pipeline_keeps_meaning(opt_level: int, seed: int) -> None:
    mod, feeds = random_module(seed, steps=20)
    with PassContext(opt_level=opt_level, instruments=[WellFormedCheck()]) as ctx:
        out = optimize(mod, opt_level, ctx)
    _run_same(mod, out, feeds)
