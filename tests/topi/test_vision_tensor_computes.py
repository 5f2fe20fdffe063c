"""Deeper variants of the grid_sample (cubic taps, reflection padding), roi_align, compress and
max_unpool computes against their references through kiln.te.eval, and the calls they leave to
the host."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.op import get_op
from kiln.topi import ComputeError
from tests.topi.harness import check, rand, run_compute


def _attrs(name, **kw):
    return get_op(name).attrs_type(**kw)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("pad", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("ac", [0, 1])
def test_grid_sample_every_mode_and_padding(mode, pad, ac):
    rng = np.random.default_rng(5)
    grid = (rng.random((2, 3, 5, 2)) * 16 - 8).astype(np.float32)  # well outside [-1, 1]: folds several times
    grid[0, 0, :2] = [[1.0, -1.0], [0.0, 0.5]]  # exact borders and centres
    check("vision.grid_sample", _attrs("vision.grid_sample", mode=mode, padding_mode=pad, align_corners=ac),
          [rand((2, 3, 4, 7), "float32", rng), grid])


@pytest.mark.parametrize("dtype", ["float64", "float16"])
@pytest.mark.parametrize("pad", ["zeros", "reflection"])
def test_grid_sample_cubic_dtypes_and_unit_axes(dtype, pad):
    rng = np.random.default_rng(6)
    grid = (rng.random((1, 2, 3, 2)) * 3 - 1.5).astype(dtype)
    for size in ((1, 5), (3, 1), (1, 1)):
        check("vision.grid_sample", _attrs("vision.grid_sample", mode="cubic", padding_mode=pad),
              [rand((1, 2) + size, dtype, rng), grid])


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_grid_sample_reflection_3d_and_ints(mode):
    rng = np.random.default_rng(7)
    grid = (rng.random((1, 2, 3, 2, 3)) * 4 - 2).astype(np.float32)
    check("vision.grid_sample", _attrs("vision.grid_sample", mode=mode, padding_mode="reflection"),
          [rand((1, 2, 3, 4, 5), "float32", rng), grid])
    if mode == "nearest":
        check("vision.grid_sample", _attrs("vision.grid_sample", mode=mode, padding_mode="reflection"),
              [rand((1, 2, 3, 5), "int32", rng), grid[:, 0, :, :, :2]])


def test_grid_sample_cubic_of_ints_runs_on_host():
    rng = np.random.default_rng(8)
    with pytest.raises(ComputeError, match="cubic"):
        run_compute("vision.grid_sample", _attrs("vision.grid_sample", mode="cubic"),
                    [rand((1, 1, 3, 3), "int32", rng), rand((1, 2, 2, 2), "float32", rng)], ())


def test_roi_align_without_sampling_ratio_runs_on_host():
    rng = np.random.default_rng(9)
    with pytest.raises(ComputeError, match="sampling_ratio"):
        run_compute("vision.roi_align", _attrs("vision.roi_align", sampling_ratio=0),
                    [rand((1, 1, 5, 5), "float32", rng), np.array([[0, 0, 3, 3]], np.float32),
                     np.zeros(1, np.int64)], ())


@pytest.mark.parametrize("scale", [0.25, 1.0, 2.0])
def test_roi_align_scales_and_boxes_past_the_border(scale):
    rng = np.random.default_rng(10)
    rois = np.array([[-4, -4, 1, 1], [2, 3, 2, 3], [0, 0, 30, 30], [3.3, 0.1, 4.9, 12]], np.float32)
    for mode in ("avg", "max"):
        check("vision.roi_align", _attrs("vision.roi_align", mode=mode, spatial_scale=scale, sampling_ratio=1,
                                         output_height=2, output_width=3),
              [rand((3, 1, 5, 11), "float32", rng), rois, np.array([2, 0, 1, 2], np.int64)])


def test_compress_condition_longer_than_axis_runs_on_host():
    rng = np.random.default_rng(11)
    with pytest.raises(ComputeError, match="condition"):
        run_compute("tensor.compress", _attrs("tensor.compress", axis=1),
                    [rand((2, 3), "float32", rng), np.array([True, False, True, True])], ())


def test_max_unpool_too_large_for_all_pairs_runs_on_host():
    x = np.zeros((1, 4, 64, 64), np.float32)
    with pytest.raises(ComputeError, match="too large"):
        run_compute("nn.max_unpool", _attrs("nn.max_unpool", kernel_shape=(2, 2), strides=(2, 2)),
                    [x, np.zeros(x.shape, np.int64)], ())
