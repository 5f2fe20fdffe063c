"""A YOLO-style single-stage detector: a strided SiLU backbone, a feature pyramid (nearest 2x Resize
upsampling concatenated with the lateral features), 1x1 prediction heads on three levels, and the
postprocess in the graph: sigmoid, objectness x class scores, and NonMaxSuppression."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from kiln.models.layers import conv, conv_bn, scalar, tensor
from kiln.models.onnx_builder import GraphBuilder


def _upsample(g: GraphBuilder, x: str, name: str) -> str:
    scales = g.const(f"{name}.scales", np.array([1, 1, 2, 2], np.float32))
    return g.node("Resize", [x, "", scales], name, mode="nearest")


def _head(g: GraphBuilder, x: str, cin: int, anchors: int, outputs: int, name: str) -> str:
    """[B, anchors * outputs, H, W] predictions as [B, anchors * H * W, outputs] rows."""
    y = conv(g, x, cin, anchors * outputs, 1, name)
    y = g.node("Reshape", [y, g.const(f"{name}.split_shape", np.array([0, anchors, outputs, -1], np.int64))],
               f"{name}.split")
    y = g.node("Transpose", [y], f"{name}.rows", perm=[0, 1, 3, 2])
    return g.node("Reshape", [y, g.const(f"{name}.flat_shape", np.array([0, -1, outputs], np.int64))], f"{name}.flat")


def _postprocess(g: GraphBuilder, preds: str, classes: int, max_boxes: int) -> str:
    """Center-form boxes and objectness x class scores into NonMaxSuppression's selected indices."""
    p = g.node("Sigmoid", [preds], "post.sigmoid")

    def cols(lo: int, hi: int, name: str) -> str:
        starts, ends, axes = (g.const(f"post.{name}.{k}", np.array([v], np.int64)) for k, v in
                              (("start", lo), ("end", hi), ("axis", 2)))
        return g.node("Slice", [p, starts, ends, axes], f"post.{name}")

    scores = g.node("Mul", [cols(4, 5, "objectness"), cols(5, 5 + classes, "classes")], "post.scores")
    scores = g.node("Transpose", [scores], "post.scores.t", perm=[0, 2, 1])
    limits = [g.const("post.max_boxes", np.array([max_boxes], np.int64)), scalar(g, "post.iou", 0.5),
              scalar(g, "post.score", 0.25)]
    return g.node("NonMaxSuppression", [cols(0, 4, "boxes"), scores, *limits], "selected", center_point_box=1)


def detector(seed: int = 0, batch: int | str = 1, size: int = 320, width: int = 32, classes: int = 20,
             anchors: int = 3, nms: bool = True) -> onnx.ModelProto:
    """image [batch, 3, size, size] (size a multiple of 32) -> predictions [batch, boxes, 5 + classes]
    and, with `nms`, selected [K, 3] (batch, class, box)."""
    g = GraphBuilder(seed)
    x, c, levels = "image", 3, []
    for i, mult in enumerate((1, 2, 4, 8, 16)):
        cout = width * mult
        x = conv_bn(g, conv_bn(g, x, c, cout, 3, f"stage{i}.down", 2, act="silu"), cout, cout, 3, f"stage{i}.conv",
                    act="silu")
        c = cout
        levels.append((x, c))
    (c3, n3), (c4, n4), (c5, n5) = levels[2:]
    p5 = conv_bn(g, c5, n5, n4, 1, "fpn.lateral5", act="silu")
    p4 = conv_bn(g, g.node("Concat", [_upsample(g, p5, "fpn.up5"), c4], "fpn.cat4", axis=1), 2 * n4, n4, 3,
                 "fpn.p4", act="silu")
    p3 = conv_bn(g, g.node("Concat", [_upsample(g, p4, "fpn.up4"), c3], "fpn.cat3", axis=1), n4 + n3, n3, 3,
                 "fpn.p3", act="silu")
    heads = [_head(g, p, n, anchors, 5 + classes, f"head{i}") for i, (p, n) in enumerate(((p3, n3), (p4, n4),
                                                                                          (p5, n4)))]
    preds = g.node("Concat", heads, "predictions", axis=1)
    boxes = anchors * sum((size // s) ** 2 for s in (8, 16, 32))
    outputs = [tensor("predictions", [batch, boxes, 5 + classes])]
    if nms:
        _postprocess(g, preds, classes, 100)
        outputs.append(tensor("selected", ["K", 3], TensorProto.INT64))
    return g.model("kiln_detector", [tensor("image", [batch, 3, size, size])], outputs)
