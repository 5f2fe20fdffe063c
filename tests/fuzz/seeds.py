"""Seed models the fuzzer mutates: small valid models of each kind Kiln imports (CNN, transformer block,
control flow, sequences, strings, quantized), built from code so that no file has to be checked in."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from kiln.models import bert_tiny, small_cnn

OPSET = 17


def _model(nodes, inputs, outputs, inits=(), opset: int = OPSET) -> onnx.ModelProto:
    graph = helper.make_graph(list(nodes), "seed", list(inputs), list(outputs), list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def _vi(name: str, elem: int, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def cnn() -> onnx.ModelProto:
    return small_cnn(seed=0, batch=1, size=8, classes=4)


def transformer() -> onnx.ModelProto:
    return bert_tiny(seed=0, batch=1, seq=4)


def control_flow() -> onnx.ModelProto:
    """An If choosing between two branches, then a Loop that adds its counter three times."""
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [],
                               [_vi("t", TensorProto.FLOAT, [2, 3])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                               [_vi("e", TensorProto.FLOAT, [2, 3])])
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
         helper.make_node("Add", ["acc_in", "fi"], ["acc_out"])],
        "body", [_vi("i", TensorProto.INT64, []), _vi("cond_in", TensorProto.BOOL, []),
                 _vi("acc_in", TensorProto.FLOAT, [2, 3])],
        [_vi("cond_out", TensorProto.BOOL, []), _vi("acc_out", TensorProto.FLOAT, [2, 3])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
             helper.make_node("Loop", ["trip", "true", "y"], ["z"], body=body)]
    inits = [numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
             numpy_helper.from_array(np.array(3, np.int64), "trip"),
             numpy_helper.from_array(np.array(True), "true")]
    return _model(nodes, [_vi("x", TensorProto.FLOAT, [2, 3])], [_vi("z", TensorProto.FLOAT, [2, 3])], inits)


def sequences() -> onnx.ModelProto:
    """SequenceConstruct, SequenceInsert, SequenceAt, SequenceLength and ConcatFromSequence."""
    nodes = [helper.make_node("SequenceConstruct", ["a", "b"], ["s"]),
             helper.make_node("SequenceInsert", ["s", "a"], ["s2"]),
             helper.make_node("SequenceAt", ["s2", "one"], ["y"]),
             helper.make_node("SequenceLength", ["s2"], ["n"]),
             helper.make_node("ConcatFromSequence", ["s2"], ["c"], axis=0)]
    inits = [numpy_helper.from_array(np.array(1, np.int64), "one")]
    inputs = [_vi("a", TensorProto.FLOAT, [2, 3]), _vi("b", TensorProto.FLOAT, [2, 3])]
    outputs = [_vi("y", TensorProto.FLOAT, [2, 3]), _vi("n", TensorProto.INT64, []),
               _vi("c", TensorProto.FLOAT, [6, 3])]
    return _model(nodes, inputs, outputs, inits)


def strings() -> onnx.ModelProto:
    """StringNormalizer then an Equal against a constant string (opset 19 compares strings), cast to int32."""
    nodes = [helper.make_node("StringNormalizer", ["x"], ["n"], case_change_action="UPPER",
                              stopwords=["the"]),
             helper.make_node("Equal", ["n", "k"], ["e"]),
             helper.make_node("Cast", ["e"], ["y"], to=TensorProto.INT32)]
    k = helper.make_tensor("k", TensorProto.STRING, [1], [b"KILN"])
    return _model(nodes, [_vi("x", TensorProto.STRING, [4])], [_vi("n", TensorProto.STRING, [4]),
                                                             _vi("y", TensorProto.INT32, [4])], [k], opset=19)


def quantized() -> onnx.ModelProto:
    """QuantizeLinear, MatMulInteger, a QLinearConv and DequantizeLinear. The scales are not powers of
    two times one another: with sx * sw / sy exactly 1/40, integer sums landed on rounding ties, which
    the interpreter (float conv, then divide) and the integer kernel (int32 sum times one float scale)
    may round apart by the 1 LSB the ONNX ops allow."""
    rng = np.random.default_rng(0)
    w = rng.integers(-8, 8, (4, 3)).astype(np.int8)
    cw = rng.integers(-8, 8, (2, 1, 3, 3)).astype(np.int8)
    inits = [numpy_helper.from_array(np.array(0.047, np.float32), "sx"),
             numpy_helper.from_array(np.array(0, np.int8), "zx"),
             numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(cw, "cw"),
             numpy_helper.from_array(np.array(0.093, np.float32), "sw"),
             numpy_helper.from_array(np.array(0, np.int8), "zw"),
             numpy_helper.from_array(np.array(0.211, np.float32), "sy"),
             numpy_helper.from_array(np.array(0, np.int8), "zy"),
             numpy_helper.from_array(np.array([1, 1, 2, 4], np.int64), "shape4")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["qx"]),
             helper.make_node("MatMulInteger", ["qx", "w", "zx", "zw"], ["mm"]),
             helper.make_node("Cast", ["mm"], ["mmf"], to=TensorProto.FLOAT),
             helper.make_node("Reshape", ["qx", "shape4"], ["q4"]),
             helper.make_node("QLinearConv", ["q4", "sx", "zx", "cw", "sw", "zw", "sy", "zy"], ["qc"],
                              pads=[1, 1, 1, 1]),
             helper.make_node("DequantizeLinear", ["qc", "sy", "zy"], ["yc"])]
    outputs = [_vi("mmf", TensorProto.FLOAT, [2, 3]), _vi("yc", TensorProto.FLOAT, [1, 2, 2, 4])]
    return _model(nodes, [_vi("x", TensorProto.FLOAT, [2, 4])], outputs, inits)


def const_of_shape() -> onnx.ModelProto:
    """ConstantOfShape of an input-independent shape plus an add: the mutations blow its shape up."""
    inits = [numpy_helper.from_array(np.array([2, 3], np.int64), "shape")]
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["c"],
                              value=numpy_helper.from_array(np.array([1.5], np.float32))),
             helper.make_node("Add", ["x", "c"], ["y"])]
    return _model(nodes, [_vi("x", TensorProto.FLOAT, [2, 3])], [_vi("y", TensorProto.FLOAT, [2, 3])], inits)


SEEDS: dict[str, Callable[[], onnx.ModelProto]] = {
    "cnn": cnn, "transformer": transformer, "control_flow": control_flow, "sequences": sequences,
    "strings": strings, "quantized": quantized, "const_of_shape": const_of_shape,
}
