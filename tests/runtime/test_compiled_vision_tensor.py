"""Compress, Col2Im, MaxUnpool, DeformConv, AffineGrid, RoiAlign, GridSample (cubic, reflection)
and Pad by pads known only at run time compile to C kernels (no group on the host) and match
kiln.evaluate, over several input values and sizes."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import kiln
from kiln.compiler.lower import build_graph_executor as build
from kiln.frontend.onnx import from_onnx
from tests.codegen.conftest import requires_gcc
from tests.helpers import BOOL, I64, F, model

pytestmark = requires_gcc
rng = np.random.default_rng(4)



def _matches(m, feeds_list, tol=1e-5):
    mod = from_onnx(m)
    cm = build(mod)
    for feeds in feeds_list:
        want, got = kiln.evaluate(mod, feeds), cm.run(feeds)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=tol, atol=tol)
    assert not cm.ran_on_host, cm.ran_on_host
    return cm


def _f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("mode", ["constant", "edge", "wrap", "reflect"])
def test_pad_by_runtime_pads(mode):
    inputs = [("x", F, ["N", 5, 3]), ("pads", I64, [4]), ("v", F, [])]
    node = helper.make_node("Pad", ["x", "pads", "v", "axes"], ["y"], mode=mode)
    axes = helper.make_tensor("axes", TensorProto.INT64, [2], [0, -1])
    m = model([node], inputs, [("y", F, ["A", 5, "B"])], inits=[axes])
    feeds = [{"x": _f32(n, 5, 3), "pads": np.array(p, np.int64), "v": np.array(2.5, np.float32)}
             for n, p in ((4, (1, 2, 3, 0)), (7, (-2, 0, 1, -2)), (1, (0, 4, 0, 5)), (3, (2, -1, -1, 2)))]
    _matches(m, feeds)


def test_compress_keeps_a_data_dependent_count():
    nodes = [helper.make_node("Compress", ["x", "c"], ["y"], axis=1),
             helper.make_node("Compress", ["x", "c2"], ["z"])]
    m = model(nodes, [("x", F, [3, 7, 2]), ("c", BOOL, [7]), ("c2", BOOL, [11])], [("y", F, [3, "K", 2]),
                                                                                  ("z", F, ["L"])])
    feeds = [{"x": _f32(3, 7, 2), "c": rng.random(7) < p, "c2": rng.random(11) < p} for p in (0.5, 0.0, 1.0, 0.3)]
    _matches(m, feeds)


def test_col2im_with_runtime_shapes():
    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"], strides=[2, 1], pads=[1, 0, 0, 1],
                            dilations=[1, 2])
    m = model([node], [("x", F, [2, 18, 8]), ("image", I64, [2]), ("block", I64, [2])], [("y", F, [2, 3, 7, 5])])
    feeds = [{"x": _f32(2, 18, 8), "image": np.array([7, 5], np.int64), "block": np.array([2, 3], np.int64)}]
    _matches(m, feeds)


def test_max_pool_then_unpool():
    nodes = [helper.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("MaxUnpool", ["p", "i", "shape"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    m = model(nodes, [("x", F, [2, 3, 4, 6]), ("shape", I64, [4])], [("y", F, [2, 3, 5, 7])])
    _matches(m, [{"x": _f32(2, 3, 4, 6), "shape": np.array([2, 3, 5, 7], np.int64)}])


def test_deform_conv_with_groups_mask_and_bias():
    node = helper.make_node("DeformConv", ["x", "w", "off", "b", "mask"], ["y"], group=2, offset_group=2,
                            pads=[1, 0, 0, 1], strides=[1, 2])
    m = model([node], [("x", F, [1, 4, 5, 7]), ("w", F, [2, 2, 3, 2]), ("off", F, [1, 24, 4, 4]), ("b", F, [2]),
                       ("mask", F, [1, 12, 4, 4])], [("y", F, [1, 2, 4, 4])])
    feeds = {"x": _f32(1, 4, 5, 7), "w": _f32(2, 2, 3, 2), "off": _f32(1, 24, 4, 4) * 2, "b": _f32(2),
             "mask": rng.random((1, 12, 4, 4)).astype(np.float32)}
    _matches(m, [feeds])


@pytest.mark.parametrize("ac", [0, 1])
def test_affine_grid_feeds_grid_sample(ac):
    nodes = [helper.make_node("AffineGrid", ["theta", "size"], ["g"], align_corners=ac),
             helper.make_node("GridSample", ["x", "g"], ["y"], mode="cubic", padding_mode="reflection",
                              align_corners=ac)]
    m = model(nodes, [("theta", F, [2, 2, 3]), ("size", I64, [4]), ("x", F, [2, 3, 4, 5])], [("y", F, [2, 3, 7, 3])])
    theta = _f32(2, 2, 3) * 1.5
    _matches(m, [{"theta": theta, "size": np.array([2, 3, 7, 3], np.int64), "x": _f32(2, 3, 4, 5)}])


@pytest.mark.parametrize("mode", ["avg", "max"])
def test_roi_align(mode):
    node = helper.make_node("RoiAlign", ["x", "rois", "idx"], ["y"], mode=mode, output_height=3, output_width=2,
                            sampling_ratio=2, spatial_scale=0.5)
    m = model([node], [("x", F, [2, 3, 8, 6]), ("rois", F, ["R", 4]), ("idx", I64, ["R"])], [("y", F, ["R", 3, 3, 2])])
    feeds = []
    for r in (5, 1):
        rois = rng.uniform(-2, 14, (r, 4)).astype(np.float32)
        rois[:, 2:] = rois[:, :2] + rng.uniform(0, 6, (r, 2)).astype(np.float32)
        feeds.append({"x": _f32(2, 3, 8, 6), "rois": rois, "idx": rng.integers(0, 2, r).astype(np.int64)})
    _matches(m, feeds)


def test_slice_by_runtime_bounds_on_symbolic_dims():
    node = helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["y"])
    inits = [helper.make_tensor("axes", TensorProto.INT64, [2], [2, 0]),
             helper.make_tensor("steps", TensorProto.INT64, [2], [-2, 1])]
    m = model([node], [("x", F, ["N", 3, "M"]), ("starts", I64, [2]), ("ends", I64, [2])],
              [("y", F, ["A", 3, "B"])], inits=inits)
    feeds = [{"x": _f32(n, 3, w), "starts": np.array(s, np.int64), "ends": np.array(e, np.int64)}
             for n, w, s, e in ((5, 7, (6, 1), (0, 4)), (4, 11, (-1, -3), (-9, 100)), (1, 1, (100, -100), (-100, 1)),
                                (6, 5, (2, 9), (2, 12)))]
    _matches(m, feeds)


def test_center_crop_pad_expansion():
    """CenterCropPad as its ONNX function body: pads and slice bounds computed from the shapes."""
    two = helper.make_tensor("two", TensorProto.INT64, [1], [2])
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Max", ["s", "shape"], ["big"]),
             helper.make_node("Sub", ["big", "s"], ["grow"]), helper.make_node("Div", ["grow", "two"], ["before"]),
             helper.make_node("Sub", ["grow", "before"], ["after"]),
             helper.make_node("Concat", ["before", "after"], ["pads"], axis=0),
             helper.make_node("Pad", ["x", "pads"], ["padded"]), helper.make_node("Shape", ["padded"], ["ps"]),
             helper.make_node("Sub", ["ps", "shape"], ["extra"]), helper.make_node("Div", ["extra", "two"], ["lo"]),
             helper.make_node("Add", ["lo", "shape"], ["hi"]), helper.make_node("Slice", ["padded", "lo", "hi"], ["y"])]
    m = model(nodes, [("x", F, [6, 5, 3]), ("shape", I64, [3])], [("y", F, ["A", "B", "C"])], inits=[two])
    feeds = [{"x": _f32(6, 5, 3), "shape": np.array(s, np.int64)} for s in ((4, 7, 3), (9, 2, 1), (6, 5, 3), (1, 1, 8))]
    _matches(m, feeds)
