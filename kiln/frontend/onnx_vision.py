"""ONNX converters for kiln/op/vision.py."""

from __future__ import annotations

import numpy as np

from kiln.frontend.onnx import Node, call, converter, onnx_attrs_to, simple
from kiln.ir.expr import Constant
from kiln.op.vision import ResizeAttrs


@converter("Resize", "Upsample")
def _resize(node: Node):
    """Resize-10 and Upsample (X, scales; scales an attribute before opset 9) sample with
    asymmetric coordinates and floor rounding; they become the latest form with those settings."""
    if node.op_type == "Resize" and node.opset >= 11:
        return call("vision.resize", node, node.inputs, onnx_attrs_to("vision.resize", node))
    mode = node.attrs.get("mode", "nearest").lower()
    if mode == "bilinear":
        mode = "linear"
    if mode not in ("nearest", "linear"):
        raise node.error(f"unsupported mode '{mode}'")
    scales = node.input(1)
    if scales is None:
        if "scales" not in node.attrs:
            raise node.error("needs scales (input or attribute)")
        scales = Constant(np.asarray(node.attrs["scales"], np.float32))
    attrs = ResizeAttrs(coordinate_transformation_mode="asymmetric", mode=mode, nearest_mode="floor")
    return call("vision.resize", node, [node.inputs[0], None, scales], attrs)


@converter("GridSample")
def _grid_sample(node: Node):
    """GridSample-16 spelled its modes bilinear / bicubic and allowed only 2-d inputs."""
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(node.attrs.get("mode", "linear"),
                                                          node.attrs.get("mode", "linear"))
    attrs = onnx_attrs_to("vision.grid_sample", node, mode=mode)
    return call("vision.grid_sample", node, node.inputs, attrs)


@converter("RoiAlign")
def _roi_align(node: Node):
    """RoiAlign-10 did not shift coordinates by half a pixel."""
    override = {} if node.opset >= 16 else {"coordinate_transformation_mode": "output_half_pixel"}
    return call("vision.roi_align", node, node.inputs, onnx_attrs_to("vision.roi_align", node, **override))


simple("AffineGrid", "vision.affine_grid")
simple("NonMaxSuppression", "vision.non_max_suppression")
simple("ImageDecoder", "vision.image_decoder")
