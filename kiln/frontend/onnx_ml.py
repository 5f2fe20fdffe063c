"""ONNX converters for the ai.onnx.ml domain (kiln/op/ml.py)."""

from __future__ import annotations

from kiln.frontend.onnx import Node, call, converter, onnx_attrs_to, simple
from kiln.ir.expr import Expr
from kiln.op.ml import LabelEncoderAttrs

ML = "ai.onnx.ml"

simple("ArrayFeatureExtractor", "ml.array_feature_extractor", domain=ML)
simple("Binarizer", "ml.binarizer", domain=ML)
simple("TreeEnsemble", "ml.tree_ensemble", domain=ML)


@converter("LabelEncoder", domain=ML)
def _label_encoder(node: Node) -> Expr:
    """LabelEncoder-1 maps strings to their index in classes_strings, or indices back to strings."""
    if node.opset >= 2:
        return call("ml.label_encoder", node, node.inputs, onnx_attrs_to("ml.label_encoder", node))
    classes = node.attrs.get("classes_strings", ())
    ids = tuple(range(len(classes)))
    string_in = node.inputs[0].type.dtype == "string"
    attrs = LabelEncoderAttrs(
        keys_strings=classes if string_in else None, keys_int64s=None if string_in else ids,
        values_int64s=ids if string_in else None, values_strings=None if string_in else classes,
        default_int64=node.attrs.get("default_int64", -1),
        default_string=node.attrs.get("default_string", "_Unused"))
    return call("ml.label_encoder", node, node.inputs, attrs)
