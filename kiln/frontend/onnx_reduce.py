"""ONNX converters for kiln/op/reduce.py: reductions, arg-reductions, scans, softmax, losses."""

from __future__ import annotations

import numpy as np

from kiln.frontend.onnx import Node, call, converter, onnx_attrs_to, simple
from kiln.ir.expr import Constant
from kiln.ir.types import TensorType
from kiln.op.reduce import SoftmaxAttrs

_REDUCE_OPS = {
    "ReduceSum": "reduce.sum", "ReduceMean": "reduce.mean", "ReduceMax": "reduce.max",
    "ReduceMin": "reduce.min", "ReduceProd": "reduce.prod", "ReduceL1": "reduce.l1",
    "ReduceL2": "reduce.l2", "ReduceLogSum": "reduce.log_sum", "ReduceLogSumExp": "reduce.log_sum_exp",
    "ReduceSumSquare": "reduce.sum_square",
}
_SOFTMAX_OPS = {"Softmax": "reduce.softmax", "LogSoftmax": "reduce.log_softmax", "Hardmax": "reduce.hardmax"}


@converter(*_REDUCE_OPS)
def _reduce(node: Node):
    """Older opsets (ReduceSum < 13, the others < 18) give `axes` as an attribute: make it the input."""
    name = _REDUCE_OPS[node.op_type]
    axes = node.input(1)
    if "axes" in node.attrs:
        axes = Constant(np.asarray(node.attrs["axes"], np.int64).reshape(-1))
    return call(name, node, [node.inputs[0], axes], onnx_attrs_to(name, node, drop=("axes",)))


@converter(*_SOFTMAX_OPS)
def _softmax(node: Node):
    """Opset < 13 coerces the input to 2-D at `axis` (default 1): normalize over every axis from
    `axis` on. That is the per-axis form when `axis` is the last axis."""
    name = _SOFTMAX_OPS[node.op_type]
    if node.opset >= 13:
        return call(name, node, node.inputs, onnx_attrs_to(name, node))
    x = node.inputs[0]
    axis = node.attrs.get("axis", 1)
    rank = x.type.ndim if isinstance(x.type, TensorType) else None
    last = axis == -1 or (rank is not None and rank > 0 and axis % rank == rank - 1)
    return call(name, node, [x], SoftmaxAttrs(axis=axis, coerce_2d=int(not last)))


simple("ArgMax", "reduce.arg_max")
simple("ArgMin", "reduce.arg_min")
simple("CumSum", "reduce.cum_sum")
simple("CumProd", "reduce.cum_prod")
simple("NegativeLogLikelihoodLoss", "reduce.negative_log_likelihood_loss")
simple("SoftmaxCrossEntropyLoss", "reduce.softmax_cross_entropy_loss")
