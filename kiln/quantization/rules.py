"""Which ONNX operators get quantized, and how: one rule per operator type, read by the QDQ rewrite.

A rule names the input slots that are activations (uint8, calibrated), the slot of a weight (int8
symmetric, per channel along the axis the rule gives, when the input is a constant; otherwise an
activation), the bias slot (int32 at input scale x weight scale), and whether the output keeps its
input's parameters (data movement and max-pooling: the integer kernel passes values through).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import onnx
from onnx import helper

ALL_INPUTS = -1


def _int_attr(node: onnx.NodeProto, name: str, default: int) -> int:
    for a in node.attribute:
        if a.name == name:
            return int(helper.get_attribute_value(a))
    return default


@dataclass(frozen=True)
class QuantRule:
    activations: tuple[int, ...] = (0,)  # (ALL_INPUTS,): every input (Concat)
    weight: int | None = None
    channel_axis: Callable[[onnx.NodeProto, int], int] | None = None  # (node, weight rank) -> output-channel axis
    bias: int | None = None
    same_as_input: bool = False  # the output reuses input 0's scale and zero point

    def activation_slots(self, node: onnx.NodeProto) -> list[int]:
        slots = range(len(node.input)) if self.activations == (ALL_INPUTS,) else self.activations
        return [i for i in slots if i < len(node.input) and node.input[i]]


_PASS_THROUGH = QuantRule(same_as_input=True)
_ELEMENTWISE = QuantRule()

QUANT_RULES: dict[str, QuantRule] = {
    "Conv": QuantRule(weight=1, channel_axis=lambda node, rank: 0, bias=2),
    "Gemm": QuantRule(weight=1, channel_axis=lambda node, rank: 0 if _int_attr(node, "transB", 0) else 1, bias=2),
    "MatMul": QuantRule(activations=(0, 1), weight=1, channel_axis=lambda node, rank: rank - 1),
    "Add": QuantRule(activations=(0, 1)),
    "Mul": QuantRule(activations=(0, 1)),
    "Concat": QuantRule(activations=(ALL_INPUTS,)),
    "MaxPool": _PASS_THROUGH,
    "AveragePool": _ELEMENTWISE,
    "GlobalAveragePool": _ELEMENTWISE,
    "Relu": _ELEMENTWISE,
    "Clip": _ELEMENTWISE,
    "LeakyRelu": _ELEMENTWISE,
    "Sigmoid": _ELEMENTWISE,
    "Reshape": _PASS_THROUGH,
    "Flatten": _PASS_THROUGH,
    "Transpose": _PASS_THROUGH,
    "Squeeze": _PASS_THROUGH,
    "Unsqueeze": _PASS_THROUGH,
}


def gemm_bias_is_plain(node: onnx.NodeProto) -> bool:
    """A Gemm whose bias adds to the accumulator as is (alpha = beta = 1), so it can be an int32 term."""
    if node.op_type != "Gemm":
        return True
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    return attrs.get("alpha", 1.0) == 1.0 and attrs.get("beta", 1.0) == 1.0
