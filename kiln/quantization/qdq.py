"""The QDQ rewrite: a float model plus a plan and calibrated ranges -> a model in ONNX Runtime's QDQ format.

Every planned activation gets QuantizeLinear -> DequantizeLinear right after it is produced, and all
its consumers read the dequantized value; weights are stored as int8 (biases as int32) initializers
behind a DequantizeLinear. The model's outputs stay float: the last layer's result is not requantized.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from kiln.errors import QuantizeError
from kiln.quantization.graph_edit import with_nodes
from kiln.quantization.names import UniqueNames
from kiln.quantization.params import (
    ActivationParams,
    activation_params,
    bias_fitting_scale,
    quantize_bias,
    quantize_weight,
    weight_scale,
)
from kiln.quantization.plan import NodePlan, QuantPlan, float_initializers

Range = tuple[float, float]


class QdqRewrite:
    """One rewrite in progress: the parameters chosen so far, the new nodes and initializers."""

    def __init__(self, model: onnx.ModelProto, plan: QuantPlan, ranges: dict[str, Range]):
        self.model, self.plan, self.ranges = model, plan, ranges
        self.consts = float_initializers(model)
        self.names = UniqueNames(model)
        self.params: dict[str, ActivationParams] = {}
        self.dequantized: dict[str, str] = {}  # computed tensor -> the name its DequantizeLinear writes
        self.constants: dict[str, str] = {}  # constant activation -> its DequantizeLinear's output
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def activation(self, t: str) -> ActivationParams:
        """t's parameters: an input's for pass-through outputs, a constant's own range, else calibrated."""
        if t not in self.params:
            if t in self.plan.same_as:
                self.params[t] = self.activation(self.plan.same_as[t])
            elif t in self.consts:
                values = numpy_helper.to_array(self.consts[t])
                self.params[t] = activation_params(values.min(initial=0.0), values.max(initial=0.0))
            elif t in self.ranges:
                self.params[t] = activation_params(*self.ranges[t])
            else:
                raise QuantizeError(f"tensor '{t}' has no calibrated range")
        return self.params[t]

    def constant(self, name: str, value: np.ndarray) -> str:
        unique = self.names.fresh(name)
        self.inits.append(numpy_helper.from_array(value, unique))
        return unique

    def dequantize(self, q: str, scale: str, zero_point: str, out: str, axis: int | None) -> str:
        written = self.names.fresh(out)
        extra = {} if axis is None else {"axis": axis}
        self.nodes.append(helper.make_node("DequantizeLinear", [q, scale, zero_point], [written],
                                           name=self.names.fresh(f"{written}_node"), **extra))
        return written

    def quantize_dequantize(self, t: str) -> None:
        """The Q/DQ pair after computed activation t."""
        p = self.activation(t)
        scale = self.constant(f"{t}_scale", np.array(p.scale, np.float32))
        zero_point = self.constant(f"{t}_zero_point", np.array(p.zero_point, np.uint8))
        q = self.names.fresh(f"{t}_quantized")
        self.nodes.append(helper.make_node("QuantizeLinear", [t, scale, zero_point], [q],
                                           name=self.names.fresh(f"{q}_node")))
        self.dequantized[t] = self.dequantize(q, scale, zero_point, f"{t}_dequantized", None)

    def constant_activation(self, t: str) -> str:
        """A constant read as an activation (an Add's bias after a MatMul): uint8 at its own range."""
        if t not in self.constants:
            p = self.activation(t)
            values = numpy_helper.to_array(self.consts[t])
            q = np.clip(np.rint(values / p.scale) + p.zero_point, 0, 255).astype(np.uint8)
            stored = self.constant(f"{t}_quantized", q)
            scale = self.constant(f"{t}_scale", np.array(p.scale, np.float32))
            zero_point = self.constant(f"{t}_zero_point", np.array(p.zero_point, np.uint8))
            self.constants[t] = self.dequantize(stored, scale, zero_point, f"{t}_dequantized", None)
        return self.constants[t]

    def weight_and_bias(self, plan: NodePlan) -> dict[str, str]:
        """The node's weight (int8) and bias (int32) behind DequantizeLinear: {float name: dequantized name}."""
        w = numpy_helper.to_array(self.consts[plan.weight])
        scale = weight_scale(w, plan.axis)
        bias = numpy_helper.to_array(self.consts[plan.bias]) if plan.bias else None
        x_scale = self.activation(plan.activations[0]).scale
        if bias is not None:
            scale = bias_fitting_scale(scale, bias, x_scale)
        q = quantize_weight(w, scale, plan.axis)
        out = {plan.weight: self._dequantized_constant(plan.weight, q.values, q.scale, np.zeros_like(q.scale, np.int8),
                                                       plan.axis)}
        if bias is not None:
            values, b_scale = quantize_bias(bias, x_scale, scale)
            axis = None if b_scale.ndim == 0 else 0
            out[plan.bias] = self._dequantized_constant(plan.bias, values, b_scale, np.zeros_like(b_scale, np.int32),
                                                        axis)
        return out

    def _dequantized_constant(self, name: str, values: np.ndarray, scale: np.ndarray, zero_point: np.ndarray,
                              axis: int | None) -> str:
        stored = self.constant(f"{name}_quantized", values)
        s = self.constant(f"{name}_scale", scale.astype(np.float32))
        z = self.constant(f"{name}_zero_point", zero_point)
        return self.dequantize(stored, s, z, f"{name}_dequantized", axis)

    def run(self) -> onnx.ModelProto:
        graph = self.model.graph
        quantized = set(self.plan.tensors)
        for vi in graph.input:
            if vi.name in quantized:
                self.quantize_dequantize(vi.name)
        for index, node in enumerate(graph.node):
            self.nodes.append(self._rewired(node, self.plan.nodes.get(index)))
            for out in node.output:
                if out in quantized:
                    self.quantize_dequantize(out)
        return with_nodes(self.model, self.nodes, self.inits)

    def _rewired(self, node: onnx.NodeProto, plan: NodePlan | None) -> onnx.NodeProto:
        """The node reading dequantized values: its own weight, bias and constants, and every Q/DQ'd tensor."""
        own: dict[str, str] = {}
        if plan is not None:
            own = {t: self.constant_activation(t) for t in plan.activations if t in self.plan.constants}
            if plan.weight is not None:
                own.update(self.weight_and_bias(plan))
        new = onnx.NodeProto()
        new.CopyFrom(node)
        new.input[:] = [own.get(i) or self.dequantized.get(i, i) for i in node.input]
        return new


def rewrite_qdq(model: onnx.ModelProto, plan: QuantPlan,
                ranges: dict[str, Range]) -> tuple[onnx.ModelProto, QdqRewrite]:
    """The QDQ model, and the rewrite that made it (its parameters and dequantized names, for the report)."""
    rewrite = QdqRewrite(model, plan, ranges)
    return rewrite.run(), rewrite
