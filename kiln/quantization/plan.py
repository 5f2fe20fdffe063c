"""What static quantization will do to a model, decided before calibration: which nodes the rule
table quantizes, each input's role (activation, weight, bias), and so which tensors need observing."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto

from kiln.quantization.rules import QUANT_RULES, QuantRule, gemm_bias_is_plain


@dataclass(frozen=True)
class NodePlan:
    """One quantized node: its activations, its constant weight (and the channel axis) and bias, if any."""

    node: onnx.NodeProto
    rule: QuantRule
    activations: tuple[str, ...]
    weight: str | None = None
    axis: int | None = None  # the weight's channel axis; None: one scale for the whole weight
    bias: str | None = None


@dataclass
class QuantPlan:
    nodes: dict[int, NodePlan] = field(default_factory=dict)  # by node index
    tensors: list[str] = field(default_factory=list)  # computed activations that get a Q/DQ pair, in order
    constants: set[str] = field(default_factory=set)  # constant activations (stored as uint8)
    same_as: dict[str, str] = field(default_factory=dict)  # output -> the input whose parameters it reuses

    def observed(self) -> list[str]:
        """Tensors whose range calibration must find (the others reuse an input's)."""
        return [t for t in self.tensors if t not in self.same_as]


def float_initializers(model: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    return {t.name: t for t in model.graph.initializer if t.data_type == TensorProto.FLOAT}


def plan_static(model: onnx.ModelProto, floats: set[str], per_channel: bool) -> QuantPlan:
    """The plan for `model`, whose float tensors (not initializers) are `floats`."""
    consts = float_initializers(model)
    consumed = {i for n in model.graph.node for i in n.input if i}
    plan = QuantPlan()
    seen: set[str] = set()
    for index, node in enumerate(model.graph.node):
        planned = _plan_node(node, floats, consts, per_channel)
        if planned is None:
            continue
        plan.nodes[index] = planned
        out = node.output[0]
        for t in (*planned.activations, out):
            if t in consts:
                plan.constants.add(t)
            elif t not in seen and (t != out or out in consumed):
                seen.add(t)
                plan.tensors.append(t)
        if planned.rule.same_as_input and planned.activations[0] not in consts:
            plan.same_as[out] = planned.activations[0]
    return plan


def _plan_node(node: onnx.NodeProto, floats: set[str], consts: dict[str, onnx.TensorProto],
               per_channel: bool) -> NodePlan | None:
    rule = QUANT_RULES.get(node.op_type)
    if rule is None or node.domain not in ("", "ai.onnx") or not node.output or node.output[0] not in floats:
        return None
    slots = rule.activation_slots(node)
    weight = node.input[rule.weight] if rule.weight is not None and rule.weight < len(node.input) else None
    if weight is not None and weight not in consts:
        slots = sorted({*slots, rule.weight}) if weight in floats else slots
        weight = None
    if not slots or any(node.input[i] not in floats and node.input[i] not in consts for i in slots):
        return None
    activations = tuple(node.input[i] for i in slots if i != rule.weight or weight is None)
    if weight is None:
        return NodePlan(node, rule, activations)
    rank = len(consts[weight].dims)
    axis = rule.channel_axis(node, rank) if per_channel and rank >= 2 else None
    return NodePlan(node, rule, activations, weight, axis, _bias(node, rule, consts, weight))


def _bias(node: onnx.NodeProto, rule: QuantRule, consts: dict[str, onnx.TensorProto], weight: str) -> str | None:
    """The bias input when it can be an int32 term: a 1-D constant of one value per output channel."""
    if rule.bias is None or rule.bias >= len(node.input) or not gemm_bias_is_plain(node):
        return None
    bias = node.input[rule.bias]
    if bias not in consts or len(consts[bias].dims) != 1:
        return None
    w = consts[weight]
    channels = w.dims[0] if node.op_type == "Conv" else np.prod(w.dims) // w.dims[_reduce_axis(node)]
    return bias if consts[bias].dims[0] == channels else None


def _reduce_axis(node: onnx.NodeProto) -> int:
    """Gemm's reduction axis in B: 1 with transB, else 0."""
    return 1 if any(a.name == "transB" and a.i for a in node.attribute) else 0
