"""ONNX converters for kiln/op/norm.py (normalizations and LRN)."""

from __future__ import annotations

from kiln.frontend.onnx import Node, call, converter, onnx_attrs_to, outputs, simple
from kiln.ir import dtype as dt

simple("InstanceNormalization", "nn.instance_normalization")
simple("LpNormalization", "nn.lp_normalization")
simple("MeanVarianceNormalization", "nn.mean_variance_normalization")
simple("LRN", "nn.lrn")


def _stash(node: Node) -> str:
    """stash_type is an ONNX element type code; Kiln attributes name dtypes."""
    try:
        return dt.from_onnx(node.attrs.get("stash_type", 1))
    except ValueError as e:
        raise node.error(str(e)) from None


@converter("LayerNormalization", "RMSNormalization")
def _layer_norm(node: Node):
    op = "nn.layer_normalization" if node.op_type == "LayerNormalization" else "nn.rms_normalization"
    attrs = onnx_attrs_to(op, node, stash_type=_stash(node))
    return outputs(call(op, node, node.inputs, attrs), node.num_outputs)


@converter("GroupNormalization")
def _group_norm(node: Node):
    """Only opset 21's per-channel scale/bias: the ONNX checker rejects the deprecated opset-18 form."""
    attrs = onnx_attrs_to("nn.group_normalization", node, stash_type=_stash(node))
    return call("nn.group_normalization", node, node.inputs, attrs)


@converter("BatchNormalization")
def _batch_norm(node: Node):
    """Before opset 14 training was `is_test=0` (opset < 7, the default there) or asking for the
    five training outputs; opset < 9 had `spatial` (only spatial=1, the later semantics, is
    supported)."""
    if node.attrs.get("spatial", 1) != 1:
        raise node.error("spatial=0 (per-activation statistics) is not supported")
    if node.opset >= 14:
        attrs = onnx_attrs_to("nn.batch_normalization", node)
        return outputs(call("nn.batch_normalization", node, node.inputs, attrs), node.num_outputs)
    if node.num_outputs > 1:
        raise node.error("training-mode BatchNormalization before opset 14 (outputs saved_mean, "
                         "saved_var) is not supported")
    attrs = onnx_attrs_to("nn.batch_normalization", node, drop=("spatial", "is_test", "consumed_inputs"),
                          training_mode=int(node.opset < 7 and node.attrs.get("is_test", 0) == 0))
    return outputs(call("nn.batch_normalization", node, node.inputs, attrs), 1)
