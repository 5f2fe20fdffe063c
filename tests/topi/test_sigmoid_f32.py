"""The float32 sigmoid of kiln/topi/vmath.py (e = e^-|x|, then e / (1 + e) or 1 / (1 + e)): within 2 ulps
of float64 over the whole float32 range, and SiLU epilogues of compiled convs (odd shapes) against
the interpreter."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

import kiln
from kiln.op.interpreter import evaluate
from tests.codegen.conftest import requires_gcc
from tests.helpers import F, model
from tests.topi.test_vmath import _run, _ulps, _whole_range

pytestmark = requires_gcc


def _sigmoid64(x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        xs = x.astype(np.float64)
        e = np.exp(-np.abs(xs))
        return np.where(xs >= 0, 1 / (1 + e), e / (1 + e))


def test_sigmoid_against_float64_over_the_whole_range():
    x = _whole_range()
    got, src = _run("nn.sigmoid", x)
    want = _sigmoid64(x)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(x))
    normal = ~np.isnan(x) & (want >= np.finfo(np.float32).tiny)
    assert _ulps(got[normal], want[normal].astype(np.float32)).max() <= 2
    tail = ~np.isnan(x) & ~normal  # a subnormal result: within 2^-126, and 0 below -88
    assert np.abs(got[tail].astype(np.float64) - want[tail]).max() < np.finfo(np.float32).tiny
    assert np.all(got[tail & (x < -88)] == 0)
    assert np.all(got[x == -np.inf] == 0) and np.all(got[x == np.inf] == 1)
    assert np.abs(got[~np.isnan(x)] - want[~np.isnan(x)]).max() < 1e-7
    for libm in ("expf(", "floorf(", "kiln_sigmoid("):
        assert libm not in src.split("kiln:unit")[-1]


def test_sigmoid_near_its_cut():
    """Around -87.3365 (where e^-|x| leaves the normal floats), -88 (the clamp) and at 0 (where the
    branch switches)."""
    x = np.concatenate([np.linspace(-88.5, -87.2, 8001), np.linspace(-1e-6, 1e-6, 2001), [-0.0, 0.0]])
    x = x.astype(np.float32)
    got, _ = _run("nn.sigmoid", x)
    want = _sigmoid64(x)
    normal = want >= np.finfo(np.float32).tiny
    assert _ulps(got[normal], want[normal].astype(np.float32)).max() <= 2
    assert np.abs(got[~normal].astype(np.float64) - want[~normal]).max() < np.finfo(np.float32).tiny
    assert np.all(got[x < -88] == 0)


@pytest.mark.parametrize("cin, cout, hw, k", [(16, 96, 13, 1), (3, 7, 11, 3), (1, 1, 1, 1), (24, 17, 5, 3)])
def test_silu_epilogue_of_a_conv(cin, cout, hw, k):
    rng = np.random.default_rng(cin * 100 + cout)
    w = (rng.standard_normal((cout, cin, k, k)) * 3).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[k // 2] * 4),
             helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])]
    m = model(nodes, [("x", F, [1, cin, hw, hw])], [("y", F, [1, cout, hw, hw])],
              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    mod = kiln.from_onnx(m)
    x = (rng.standard_normal((1, cin, hw, hw)) * 4).astype(np.float32)
    got = kiln.InferenceSession(kiln.build(mod, opt_level=3), threads=1).run(None, {"x": x})[0]
    want = evaluate(mod, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * float(np.abs(want).max()))
