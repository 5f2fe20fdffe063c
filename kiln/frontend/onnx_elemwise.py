"""ONNX converters for the elementwise family (kiln/op/elemwise.py).

Older opsets are normalized here: opset-1 `consumed_inputs` is dropped, opset < 7 `broadcast`/
`axis` become numpy broadcasting, Clip's opset < 11 attributes become inputs, Cast-1's string
`to` becomes a dtype, CastLike becomes a Cast and Identity is the value itself.
"""

from __future__ import annotations

import numpy as np
import onnx

from kiln.frontend.onnx import Node, call, converter, onnx_attrs_to, simple
from kiln.ir import dtype as dt
from kiln.ir.expr import Constant, Expr
from kiln.ir.types import TensorType

LEGACY = ("consumed_inputs",)

SAME_NAME = {
    "Abs": "math.abs", "Neg": "math.neg", "Sign": "math.sign", "Reciprocal": "math.reciprocal",
    "Sqrt": "math.sqrt", "Exp": "math.exp", "Log": "math.log", "Erf": "math.erf", "Ceil": "math.ceil",
    "Floor": "math.floor", "Round": "math.round", "Sin": "math.sin", "Cos": "math.cos", "Tan": "math.tan",
    "Asin": "math.asin", "Acos": "math.acos", "Atan": "math.atan", "Sinh": "math.sinh", "Cosh": "math.cosh",
    "Tanh": "math.tanh", "Asinh": "math.asinh", "Acosh": "math.acosh", "Atanh": "math.atanh",
    "Not": "math.not", "BitwiseNot": "math.bitwise_not", "IsNaN": "math.is_nan", "IsInf": "math.is_inf",
    "Relu": "nn.relu", "LeakyRelu": "nn.leaky_relu", "Elu": "nn.elu", "Selu": "nn.selu",
    "Celu": "nn.celu", "Sigmoid": "nn.sigmoid", "HardSigmoid": "nn.hard_sigmoid", "HardSwish": "nn.hard_swish",
    "Softplus": "nn.softplus", "Softsign": "nn.softsign", "Mish": "nn.mish", "Gelu": "nn.gelu",
    "Swish": "nn.swish", "ThresholdedRelu": "nn.thresholded_relu", "Shrink": "nn.shrink",
    "Mod": "math.mod", "BitShift": "math.bit_shift", "BitwiseAnd": "math.bitwise_and",
    "BitwiseOr": "math.bitwise_or", "BitwiseXor": "math.bitwise_xor", "GreaterOrEqual": "math.greater_or_equal",
    "LessOrEqual": "math.less_or_equal", "Max": "math.max", "Min": "math.min", "Mean": "math.mean",
    "Sum": "math.sum", "Where": "math.where",
}

# binary ops that had opset < 7 `broadcast` / `axis` attributes
LEGACY_BROADCAST = {
    "Add": "math.add", "Sub": "math.sub", "Mul": "math.mul", "Div": "math.div", "Pow": "math.pow",
    "And": "math.and", "Or": "math.or", "Xor": "math.xor", "Equal": "math.equal", "Greater": "math.greater",
    "Less": "math.less",
}

for _op_type, _op_name in SAME_NAME.items():
    simple(_op_type, _op_name, drop=LEGACY)


def _aligned_constant(node: Node, b: Expr, trailing: int) -> Expr:
    """Constant `b` with `trailing` size-1 dims appended, so numpy broadcasting lines it up."""
    if trailing == 0:
        return b
    if not isinstance(b, Constant):
        raise node.error("this legacy (opset < 7) broadcast is supported only for a constant input")
    return Constant(b.data.reshape(b.data.shape + (1,) * trailing))


def _legacy_broadcast_rhs(node: Node) -> Expr:
    """B aligned as opset < 7 did: with broadcast=1, B's dims match A's from `axis` on."""
    a, b = node.inputs
    if not node.attrs.get("broadcast", 0) or "axis" not in node.attrs:
        return b
    rank_a, rank_b = a.type.ndim, b.type.ndim
    if rank_a is None or rank_b is None:
        raise node.error("legacy broadcast with 'axis' needs inputs of known rank")
    axis = node.attrs["axis"] + (rank_a if node.attrs["axis"] < 0 else 0)
    trailing = rank_a - axis - rank_b
    if trailing < 0:
        raise node.error(f"legacy broadcast: B of rank {rank_b} does not fit A of rank {rank_a} at axis {axis}")
    return _aligned_constant(node, b, trailing)


def _binary_converter(op_type: str, op_name: str) -> None:
    @converter(op_type)
    def conv(node: Node) -> Expr:
        attrs = onnx_attrs_to(op_name, node, drop=LEGACY + ("broadcast", "axis"))
        return call(op_name, node, [node.inputs[0], _legacy_broadcast_rhs(node)], attrs)


for _op_type, _op_name in LEGACY_BROADCAST.items():
    _binary_converter(_op_type, _op_name)


@converter("PRelu")
def _prelu(node: Node) -> Expr:
    """Before opset 7 a 1-D slope held one value per channel (axis 1)."""
    x, slope = node.inputs
    rank = x.type.ndim or 0
    if node.opset < 7 and rank > 2 and slope.type.ndim == 1 and slope.type.shape != (1,):
        slope = _aligned_constant(node, slope, rank - 2)
    return call("nn.prelu", node, [x, slope], onnx_attrs_to("nn.prelu", node, drop=LEGACY))


@converter("Clip")
def _clip(node: Node) -> Expr:
    """Opset < 11 carried min/max as attributes: make them scalar constant inputs."""
    if node.opset >= 11:
        return call("math.clip", node, node.inputs)
    x = node.inputs[0]
    bounds = [node.attrs.get(k) for k in ("min", "max")]
    np_dtype = dt.to_numpy(x.type.dtype)
    return call("math.clip", node, [x] + [None if v is None else Constant(np.array(v, np_dtype)) for v in bounds])


def _dtype_attr(node: Node) -> str:
    """`to` as a dtype name: an enum code, or (Cast-1) the enum's name as a string."""
    to = node.attrs["to"]
    if isinstance(to, str):
        try:
            to = onnx.TensorProto.DataType.Value(to.upper())
        except ValueError:
            raise node.error(f"unknown data type '{to}'") from None
    try:
        return dt.from_onnx(to)
    except ValueError as e:
        raise node.error(str(e)) from None


@converter("Cast")
def _cast(node: Node) -> Expr:
    attrs = onnx_attrs_to("math.cast", node, to=_dtype_attr(node))
    return call("math.cast", node, node.inputs, attrs)


@converter("CastLike")
def _cast_like(node: Node) -> Expr:
    """CastLike is a Cast to the (statically known) dtype of its second input."""
    like = node.inputs[1].type
    if not isinstance(like, TensorType):
        raise node.error(f"second input must be a tensor, got {like}")
    attrs = onnx_attrs_to("math.cast", node, to=like.dtype)
    return call("math.cast", node, node.inputs[:1], attrs)


@converter("BitCast")
def _bit_cast(node: Node) -> Expr:
    return call("math.bit_cast", node, node.inputs, onnx_attrs_to("math.bit_cast", node, to=_dtype_attr(node)))


@converter("Identity")
def _identity(node: Node) -> Expr:
    """Identity adds nothing to a functional graph: its output is its input."""
    return node.inputs[0]
