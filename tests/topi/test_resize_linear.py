"""The fast resize paths, compiled, against the float64 reference: the let-free linear resize of float
tensors (kiln/topi/resize_linear.py) in every affine coordinate mode, up- and downsampling, sizes 1 and
primes, float16; nearest integer up/downsamples by integer index arithmetic (exactly equal); and the
general path still taken where they do not apply."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.compiler.lower import build_graph_executor as build
from kiln.op import get_op
from kiln.topi.resize_linear import affine_source, linear_in_input_dtype
from tests.codegen.conftest import requires_gcc
from tests.helpers import one_op_module

pytestmark = requires_gcc
MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
         "tf_half_pixel_for_nn")


def _attrs(**kw):
    return get_op("vision.resize").attrs_type(**kw)


def _compiled(x: np.ndarray, scales: np.ndarray | None, sizes: np.ndarray | None, **kw) -> tuple[np.ndarray, np.ndarray]:
    empty = np.zeros(0, np.float32)
    arrays = [x, None, scales if scales is not None else empty, sizes]
    mod = one_op_module("vision.resize", arrays, const=(2, 3), **kw)
    cm = build(mod)
    assert cm.host_groups == []
    got = cm.run({"x0": x})[0]
    op = get_op("vision.resize")
    want = op.reference(_attrs(**kw), x, None, scales if scales is not None else None, sizes)
    return got, want


@pytest.mark.parametrize("coord", MODES)
@pytest.mark.parametrize("shape, scales", [((1, 3, 5, 7), (1, 1, 2, 2)), ((2, 2, 13, 11), (1, 1, 0.6, 1.7)),
                                           ((1, 1, 1, 1), (1, 1, 3, 2)), ((1, 2, 7, 3), (1, 1, 1, 0.34))])
def test_linear_every_coordinate_mode(coord, shape, scales):
    rng = np.random.default_rng(len(coord) + shape[2])
    x = rng.standard_normal(shape).astype(np.float32)
    got, want = _compiled(x, np.array(scales, np.float32), None, mode="linear", coordinate_transformation_mode=coord)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_linear_sizes_one_axis_and_float16():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 17, 4)).astype(np.float16)
    got, want = _compiled(x, None, np.array([29], np.int64), mode="linear", axes=(1,))
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-3, atol=2e-3)


def test_which_resizes_take_the_fast_path():
    assert linear_in_input_dtype(_attrs(mode="linear"), "float32")
    assert not linear_in_input_dtype(_attrs(mode="linear", antialias=1), "float32")
    assert not linear_in_input_dtype(_attrs(mode="linear", exclude_outside=1), "float32")
    assert not linear_in_input_dtype(_attrs(mode="linear", coordinate_transformation_mode="tf_crop_and_resize"),
                                     "float32")
    assert not linear_in_input_dtype(_attrs(mode="cubic"), "float32")
    assert not linear_in_input_dtype(_attrs(mode="linear"), "uint8")
    assert affine_source("align_corners", 1.0, 1, 1) == (0.0, 0.0)
    with pytest.raises(ValueError):
        affine_source("tf_crop_and_resize", 2.0, 4, 8)


@pytest.mark.parametrize("nearest", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
@pytest.mark.parametrize("coord", MODES)
@pytest.mark.parametrize("scales", [(1, 1, 2, 3), (1, 1, 0.5, 1 / 3), (1, 1, 1.5, 2.5)])
def test_nearest_integer_rule_matches_reference(nearest, coord, scales):
    """Integer up/downsamples read by (y * mul + add) // div; other scales keep the float64 positions."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 2, 6, 9)).astype(np.float32)
    got, want = _compiled(x, np.array(scales, np.float32), None, mode="nearest", nearest_mode=nearest,
                          coordinate_transformation_mode=coord)
    np.testing.assert_array_equal(got, want)


def test_nearest_rule_is_found_only_where_exact():
    from kiln.topi.resize import _nearest_rule

    attrs = _attrs(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    assert _nearest_rule(attrs, 40, 2.0, 80, (0.0, 1.0)) == (1, 0, 2)
    assert _nearest_rule(attrs, 40, 0.5, 20, (0.0, 1.0)) == (2, 0, 1)
    assert _nearest_rule(attrs, 5, 1.6, 8, (0.0, 1.0)) is None
    assert _nearest_rule(_attrs(mode="linear"), 40, 2.0, 80, (0.0, 1.0)) is None
