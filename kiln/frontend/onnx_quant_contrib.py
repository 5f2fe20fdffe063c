"""ONNX Runtime's quantized contrib operators (domain com.microsoft), as ONNX Runtime's quantizer writes
them: each becomes the DequantizeLinear -> float operator -> QuantizeLinear graph it stands for (or the
DynamicQuantizeLinear -> MatMulInteger -> scale chain), the form kiln/transform/int8_ops.py turns into
integer kernels where the operator is a matrix product, and FuseOps into one elementwise kernel where it
is not (QLinearAdd, QLinearMul, QLinearSigmoid ...).
"""

from __future__ import annotations

import numpy as np

from kiln.errors import ImportError_
from kiln.frontend.onnx import Node, call, converter, outputs
from kiln.ir.expr import Constant, Expr
from kiln.op.concat_slice import ConcatAttrs
from kiln.op.elemwise import CastAttrs, LeakyReluAttrs
from kiln.op.linalg import GemmAttrs
from kiln.op.quant import DequantizeLinearAttrs, QuantizeLinearAttrs
from kiln.op.reduce import SoftmaxAttrs

MS = "com.microsoft"


def _dq(node: Node, x: Expr, scale: Expr, zp: Expr | None, axis: int = 1) -> Expr:
    return call("quant.dequantize_linear", node, [x, scale, zp], DequantizeLinearAttrs(axis=axis))


def _q(node: Node, y: Expr, scale: Expr | None, zp: Expr | None) -> Expr:
    """QuantizeLinear of y; None (no output scale): y stays float."""
    if scale is None:
        return y
    return call("quant.quantize_linear", node, [y, scale, zp], QuantizeLinearAttrs())


def _product(node: Node, a: Expr, b: Expr) -> Expr:
    """a * b, folded now when both are constants (a bias's scale: the int32 bias then dequantizes as a
    constant)."""
    if isinstance(a, Constant) and isinstance(b, Constant):
        return Constant(np.asarray(a.data * b.data, np.float32))
    return call("math.mul", node, [a, b])


def _need(node: Node, *idx: int) -> list[Expr]:
    vals = [node.input(i) for i in idx]
    if any(v is None for v in vals):
        raise node.error(f"needs inputs {', '.join(map(str, idx))}")
    return vals  # type: ignore[return-value]


def _binary(op: str):
    def conv(node: Node) -> Expr:
        a, a_s, b, b_s, c_s = _need(node, 0, 1, 3, 4, 6)
        y = call(op, node, [_dq(node, a, a_s, node.input(2)), _dq(node, b, b_s, node.input(5))])
        return _q(node, y, c_s, node.input(7))

    return conv


converter("QLinearAdd", domain=MS)(_binary("math.add"))
converter("QLinearMul", domain=MS)(_binary("math.mul"))


def _unary(op: str, attrs_of=lambda node: None):
    def conv(node: Node) -> Expr:
        x, x_s, y_s = _need(node, 0, 1, 3)
        y = call(op, node, [_dq(node, x, x_s, node.input(2))], attrs_of(node))
        return _q(node, y, y_s, node.input(4))

    return conv


converter("QLinearSigmoid", domain=MS)(_unary("nn.sigmoid"))
converter("QLinearLeakyRelu", domain=MS)(
    _unary("nn.leaky_relu", lambda node: LeakyReluAttrs(alpha=node.attrs.get("alpha", 0.01))))
converter("QLinearSoftmax", domain=MS)(
    _unary("reduce.softmax", lambda node: SoftmaxAttrs(axis=node.attrs.get("axis", -1),
                                                        coerce_2d=int(node.attrs.get("opset", 13) < 13))))


@converter("QLinearGlobalAveragePool", domain=MS)
def _global_average_pool(node: Node) -> Expr:
    if node.attrs.get("channels_last", 0):
        raise node.error("channels_last=1 is not supported (NCHW only)")
    return _unary("nn.global_average_pool")(node)


@converter("QLinearConcat", domain=MS)
def _concat(node: Node) -> Expr:
    y_s, y_zp = _need(node, 0, 1)
    rest = node.inputs[2:]
    if not rest or len(rest) % 3:
        raise node.error("needs (X, X_scale, X_zero_point) triples after Y_scale and Y_zero_point")
    xs = [_dq(node, rest[i], rest[i + 1], rest[i + 2]) for i in range(0, len(rest), 3)]
    return _q(node, call("tensor.concat", node, xs, ConcatAttrs(axis=node.attrs["axis"])), y_s, y_zp)


@converter("QGemm", domain=MS)
def _qgemm(node: Node) -> Expr:
    a, a_s, b, b_s = _need(node, 0, 1, 3, 4)
    trans_b = node.attrs.get("transB", 0)
    if node.attrs.get("transA", 0):
        raise ImportError_(f"node '{node.name}' (QGemm): transA=1 is not supported")
    args = [_dq(node, a, a_s, node.input(2)), _dq(node, b, b_s, node.input(5), axis=0 if trans_b else 1)]
    c = node.input(6)
    if c is not None:
        args.append(_dq(node, c, _product(node, a_s, b_s), None, axis=0))
    y = call("linalg.gemm", node, args, GemmAttrs(alpha=node.attrs.get("alpha", 1.0), transB=trans_b))
    return _q(node, y, node.input(7), node.input(8))


def _scaled_integer_product(node: Node, a: Expr, b: Expr, a_zp: Expr | None, b_zp: Expr | None,
                            a_scale: Expr, b_scale: Expr, bias: Expr | None) -> Expr:
    """float(MatMulInteger(a, b)) * a_scale * b_scale (+ bias), the chain int8_ops grows a qgemm from."""
    acc = call("linalg.mat_mul_integer", node, [a, b, a_zp, b_zp])
    y = call("math.mul", node, [call("math.cast", node, [acc], CastAttrs(to="float32")), a_scale])
    y = call("math.mul", node, [y, b_scale])
    return y if bias is None else call("math.add", node, [y, bias])


@converter("MatMulIntegerToFloat", domain=MS)
def _matmul_integer_to_float(node: Node) -> Expr:
    a, b, a_s, b_s = _need(node, 0, 1, 2, 3)
    return _scaled_integer_product(node, a, b, node.input(4), node.input(5), a_s, b_s, node.input(6))


@converter("DynamicQuantizeMatMul", domain=MS)
def _dynamic_quantize_matmul(node: Node) -> Expr:
    a, b, b_s = _need(node, 0, 1, 2)

    q = outputs(call("quant.dynamic_quantize_linear", node, [a]), 3)
    return _scaled_integer_product(node, q[0], b, q[2], node.input(3), q[1], b_s, node.input(4))
