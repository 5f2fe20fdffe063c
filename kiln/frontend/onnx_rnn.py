"""ONNX converters for kiln/op/rnn.py."""

from __future__ import annotations

from kiln.frontend.onnx import Node, call, converter, onnx_attrs_to, outputs, simple

_OPS = {"RNN": "nn.rnn", "GRU": "nn.gru", "LSTM": "nn.lstm"}


@converter("RNN", "GRU", "LSTM")
def _recurrent(node: Node):
    """Opset-1 forms differ only by `output_sequence` (whether Y is emitted), which an unused
    output already expresses; later forms add `layout`, whose default keeps the old meaning."""
    op = _OPS[node.op_type]
    attrs = onnx_attrs_to(op, node, drop=("output_sequence",))
    return outputs(call(op, node, node.inputs, attrs), node.num_outputs)


simple("CausalConvWithState", "nn.causal_conv_with_state")
simple("LinearAttention", "nn.linear_attention")
