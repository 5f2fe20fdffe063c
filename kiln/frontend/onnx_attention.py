"""ONNX converters for kiln/op/attention.py."""

from __future__ import annotations

from kiln.frontend.onnx import Node, call, converter, onnx_attrs_to, outputs, simple
from kiln.ir import dtype as dt
from kiln.ir.types import ANY, TensorType
from kiln.op.attention import flex_softmax_dtype


def _precision(node: Node) -> dict:
    """softmax_precision arrives as a TensorProto code; the op keeps a dtype name."""
    code = node.attrs.get("softmax_precision")
    if code is None:
        return {}
    if code not in (1, 10, 11, 16):
        raise node.error(f"softmax_precision must be FLOAT, FLOAT16, DOUBLE or BFLOAT16, got {code}")
    return {"softmax_precision": dt.from_onnx(code)}


@converter("Attention")
def _attention(node: Node):
    """Opsets 23-25 share one form: later opsets only add inputs/attributes whose defaults are off."""
    attrs = onnx_attrs_to("nn.attention", node, **_precision(node))
    return outputs(call("nn.attention", node, node.inputs, attrs), node.num_outputs)


@converter("FlexAttention", domain="ai.onnx.preview")
def _flex_attention(node: Node):
    """Modifier graphs become Functions of the (B, Hq, L, S) score tensor, passed as the first two inputs."""
    attrs = onnx_attrs_to("nn.flex_attention", node, drop=("score_mod", "prob_mod"), **_precision(node))
    q, k = node.inputs[0].type, node.inputs[1].type
    if not (isinstance(q, TensorType) and isinstance(k, TensorType)):
        raise node.error(f"Q and K must be tensors, got {q} and {k}")
    lead = q.shape[:3] if q.shape is not None and len(q.shape) == 4 else (ANY,) * 3
    keys = k.shape[2] if k.shape is not None and len(k.shape) == 4 else ANY
    scores = TensorType(tuple(lead) + (keys,), flex_softmax_dtype(attrs, q.dtype))
    mods = [node.ctx.subgraph_function(node.attrs[m], [scores]) if m in node.attrs else None
            for m in ("score_mod", "prob_mod")]
    return [call("nn.flex_attention", node, mods + list(node.inputs), attrs)]


simple("RotaryEmbedding", "nn.rotary_embedding")
simple("SwiGLU", "nn.swiglu")
