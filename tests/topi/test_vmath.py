"""The vectorizable exp/erf/tanh expressions (kiln/topi/vmath.py), compiled through the fast-math
operators and nn.gelu, over the whole float32 range (inf, NaN, subnormals, random bit patterns):
within a few ulps of their numpy specifications and of float64 math, and free of libm calls."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kiln.codegen.c_source import generate
from kiln.compiler.fuse import fuse
from kiln.compiler.lower import build_graph_executor as build
from kiln.compiler.lower import lower_groups
from tests.codegen.conftest import requires_gcc
from tests.topi.compiled_op import op_module

pytestmark = requires_gcc
rng = np.random.default_rng(3)
_erf64 = np.vectorize(math.erf, otypes=[np.float64])



def _whole_range() -> np.ndarray:
    """Specials, subnormals, the range edges of each function, and random bit patterns."""
    f = np.finfo(np.float32)
    special_values = [0.0, -0.0, np.inf, -np.inf, np.nan, f.tiny, -f.tiny, f.smallest_subnormal, 1e-40, -1e-40,
                      f.max, f.min, 88.72, 88.73, 89.0, -87.3, -103.9, -104.0, -150.0, 1e-4, 4.0, -4.0, 9.0, 0.5]
    bits = rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    dense = np.linspace(-110, 100, 20011, dtype=np.float32)
    return np.concatenate([np.array(special_values, np.float32), bits, dense]).astype(np.float32)


def _run(name: str, x: np.ndarray, **attrs) -> tuple[np.ndarray, str]:
    mod = op_module(name, [x], **attrs)
    cm = build(mod)
    assert cm.host_groups == []
    kernels, _, _ = lower_groups(fuse(mod))
    return cm.run({"x0": x})[0], generate([k.func for k in kernels]).code


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in float32 units in the last place (NaN where either is NaN)."""
    ia = a.astype(np.float32).view(np.int32).astype(np.int64)
    ib = b.astype(np.float32).view(np.int32).astype(np.int64)
    ia = np.where(ia < 0, np.int64(-(2**31)) - ia, ia)
    ib = np.where(ib < 0, np.int64(-(2**31)) - ib, ib)
    return np.abs(ia - ib)


@pytest.mark.parametrize("name", ["math.fast_exp", "math.fast_erf", "math.fast_tanh", "nn.fast_sigmoid"])
def test_fast_ops_match_their_specification(name):
    from kiln.op import get_op

    x = _whole_range()
    got, src = _run(name, x)
    op = get_op(name)
    with np.errstate(all="ignore"):
        want = op.reference(op.attrs_type() if op.attrs_type else None, x)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    # gcc contracts a * b + c into fmas: a few roundings from the spec's plain arithmetic
    assert _ulps(got[ok], want[ok]).max() <= 8
    for libm in ("expf(", "erff(", "tanhf(", "floorf("):
        assert libm not in src.split("kiln:unit")[-1]


def test_exp_against_float64_math():
    x = _whole_range()
    got, _ = _run("math.fast_exp", x)
    with np.errstate(all="ignore"):
        want = np.exp(x.astype(np.float64))
    normal = (want > np.finfo(np.float32).tiny) & (want < np.finfo(np.float32).max)
    rel = np.abs(got[normal] - want[normal]) / want[normal]
    assert rel.max() < 2.5e-7
    assert np.all(got[x > 89] == np.inf) and np.all(got[x < -104] == 0)
    sub = ~normal & ~np.isnan(x) & (x < 0)  # subnormal results: within one subnormal step
    assert np.abs(got[sub] - want[sub]).max() <= 1.5e-45


def test_erf_and_gelu_against_float64_math():
    x = _whole_range()
    got, _ = _run("math.fast_erf", x)
    ok = ~np.isnan(x)
    assert np.abs(got[ok] - _erf64(x[ok].astype(np.float64))).max() < 6e-7
    g, src = _run("nn.gelu", x)
    with np.errstate(all="ignore"):  # random bit patterns include signaling NaNs
        xs = x.astype(np.float64)
        want = 0.5 * xs * (1 + _erf64(xs / math.sqrt(2)))
    finite = np.isfinite(want) & (np.abs(xs) < 1e30)
    err = np.abs(g[finite] - want[finite]) / np.maximum(1.0, np.abs(want[finite]))
    assert err.max() < 1e-6
    assert "erff(" not in src.split("kiln:unit")[-1]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name, attrs", [("nn.fast_gelu", {}), ("nn.fast_gelu", {"approximate": "tanh"}),
                                         ("math.fast_exp", {})])
def test_narrow_floats_round_once(name, attrs, dtype):
    from kiln.ir.dtype import to_numpy
    from kiln.op import get_op

    x = np.linspace(-12, 12, 997).astype(to_numpy(dtype))
    got, _ = _run(name, x, **attrs)
    op = get_op(name)
    want = op.reference(op.attrs_type(**attrs) if op.attrs_type else None, x)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-2, atol=1e-2)
