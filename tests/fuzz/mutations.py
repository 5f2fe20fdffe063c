"""Structured mutations of a valid ONNX model, each a function (model, rng) -> model or serialized bytes.

Every mutation is deterministic given its numpy Generator, so a case is reproduced from (seed model,
mutation, seed) alone. A mutation that does not apply to a model (no attribute to break, say) falls
back to flipping bytes, so every case tests something.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

Mutant = onnx.ModelProto | bytes
OP_TYPES = ["Relu", "Add", "MatMul", "Conv", "Reshape", "Concat", "Gather", "Softmax", "If", "Loop",
            "SequenceAt", "ConstantOfShape", "Transpose", "NoSuchOp", "Split", "Cast", "Identity"]
EXTREME_INTS = [0, -1, -2, 2**31 - 1, -(2**31), 2**62, -(2**63), 10**12, 7]
EXTREME_FLOATS = [float("nan"), float("inf"), -float("inf"), 0.0, -1e30, 1e30]
HUGE_DIMS = [0, 10**6, 10**12, 2**40, -1, -5]
DTYPES = [TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT8, TensorProto.UINT8, TensorProto.BOOL,
          TensorProto.STRING, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.COMPLEX64,
          TensorProto.UNDEFINED, 40]


class NotApplicable(Exception):
    """The mutation has nothing to act on in this model."""


def _pick(rng: np.random.Generator, seq):
    if len(seq) == 0:
        raise NotApplicable
    return seq[int(rng.integers(len(seq)))]


def _node(m: onnx.ModelProto, rng: np.random.Generator) -> onnx.NodeProto:
    return _pick(rng, m.graph.node)


def wrong_op_type(m: onnx.ModelProto, rng: np.random.Generator) -> Mutant:
    _node(m, rng).op_type = _pick(rng, OP_TYPES)
    return m


def drop_input(m: onnx.ModelProto, rng: np.random.Generator) -> Mutant:
    node = _pick(rng, [n for n in m.graph.node if n.input])
    del node.input[int(rng.integers(len(node.input)))]
    return m


def extra_input(m: onnx.ModelProto, rng: np.random.Generator) -> Mutant:
    names = [i.name for i in m.graph.input] + [i.name for i in m.graph.initializer] + ["", "nowhere"]
    _node(m, rng).input.append(_pick(rng, names))
    return m


def extreme_attribute(m: onnx.ModelProto, rng: np.random.Generator) -> Mutant:
    attr = _pick(rng, [a for n in m.graph.node for a in n.attribute if a.type in (1, 2, 7)])
    if attr.type == onnx.AttributeProto.INT:
        attr.i = _pick(rng, EXTREME_INTS)
    elif attr.type == onnx.AttributeProto.FLOAT:
        attr.f = _pick(rng, EXTREME_FLOATS)
    elif attr.ints:
        attr.ints[int(rng.integers(len(attr.ints)))] = _pick(rng, EXTREME_INTS)
    else:
        attr.ints.append(_pick(rng, EXTREME_INTS))
    return m


def wrong_initializer_dims(m: onnx.ModelProto, rng: np.random.Generator) -> Mutant:
    init = _pick(rng, m.graph.initializer)
    dims = list(init.dims) or [1]
    choice = int(rng.integers(3))
    if choice == 0:
        dims[int(rng.integers(len(dims)))] += int(rng.integers(1, 4))
    elif choice == 1:
        dims = dims + [1] if rng.random() < 0.5 else dims[1:]
    else:
        dims[int(rng.integers(len(dims)))] = _pick(rng, HUGE_DIMS)
    del init.dims[:]
    init.dims.extend(dims)
    return m


def input_dims(m: onnx.ModelProto, rng: np.random.Generator) -> Mutant:
    vi = _pick(rng, [i for i in m.graph.input if i.type.tensor_type.shape.dim])
    dim = _pick(rng, vi.type.tensor_type.shape.dim)
    if rng.random() < 0.15:
        dim.dim_param = "fuzz_dim"
    else:
        dim.dim_value = _pick(rng, HUGE_DIMS)
    return m


def wrong_dtype(m: onnx.ModelProto, rng: np.random.Generator) -> Mutant:
    choice = int(rng.integers(3))
    if choice == 0 and m.graph.input:
        _pick(rng, m.graph.input).type.tensor_type.elem_type = _pick(rng, DTYPES)
    elif choice == 1 and m.graph.initializer:
        _pick(rng, m.graph.initializer).data_type = _pick(rng, DTYPES)
    else:
        _pick(rng, m.graph.output).type.tensor_type.elem_type = _pick(rng, DTYPES)
    return m


def duplicate_output(m: onnx.ModelProto, rng: np.random.Generator) -> Mutant:
    if rng.random() < 0.5:
        m.graph.output.append(_pick(rng, m.graph.output))
    else:
        a, b = _node(m, rng), _node(m, rng)
        if b.output:
            a.output.append(b.output[0])
    return m


def missing_initializer(m: onnx.ModelProto, rng: np.random.Generator) -> Mutant:
    if m.graph.initializer:
        del m.graph.initializer[int(rng.integers(len(m.graph.initializer)))]
    else:
        m.graph.node.append(helper.make_node("Identity", ["never_defined"], ["fuzz_out"]))
    return m


def bad_versions(m: onnx.ModelProto, rng: np.random.Generator) -> Mutant:
    if rng.random() < 0.5:
        m.ir_version = _pick(rng, [0, 1, 2, 3, 99, -1, 2**40])
    else:
        op = m.opset_import[0]
        if rng.random() < 0.3:
            op.domain = _pick(rng, ["com.fuzz", "ai.onnx.ml", "ai.onnx"])
        else:
            op.version = _pick(rng, [0, 1, 5, 9, 99, 1000, -1])
    return m


def external_data_outside(m: onnx.ModelProto, rng: np.random.Generator) -> Mutant:
    init = _pick(rng, m.graph.initializer)
    init.ClearField("raw_data")
    for field in ("float_data", "int32_data", "int64_data", "double_data", "string_data"):
        init.ClearField(field)
    init.data_location = TensorProto.EXTERNAL
    where = _pick(rng, ["../../../../etc/passwd", "/etc/passwd", "../outside.bin", "missing.bin", "..", ""])
    entries = [("location", where), ("offset", str(_pick(rng, [0, 10**15, -4]))),
               ("length", str(_pick(rng, [4, 10**15, 0])))]
    for key, value in entries:
        init.external_data.add(key=key, value=value)
    return m


def _branch(node: onnx.NodeProto, name: str, outputs) -> onnx.GraphProto:
    attr = node.attribute.add(name=name, type=onnx.AttributeProto.GRAPH)
    attr.g.name = f"{name}_{id(attr)}"
    attr.g.output.extend(outputs)
    return attr.g


def nested_if(m: onnx.ModelProto, rng: np.random.Generator) -> Mutant:
    """Wrap the graph's nodes in `depth` Ifs on a constant condition, built in place (no copies of the
    levels below, which would make this quadratic)."""
    depth = int(_pick(rng, [2, 8, 30, 60]))
    nodes, outputs = list(m.graph.node), list(m.graph.output)
    del m.graph.node[:]
    container = m.graph.node
    for _ in range(depth):
        node = container.add(op_type="If", input=["fuzz_true"], output=[o.name for o in outputs])
        _branch(node, "else_branch", outputs).node.extend(nodes)
        container = _branch(node, "then_branch", outputs).node
    container.extend(nodes)
    m.graph.initializer.append(numpy_helper.from_array(np.array(True), "fuzz_true"))
    return m


def huge_constant_of_shape(m: onnx.ModelProto, rng: np.random.Generator) -> Mutant:
    shape = _pick(rng, [[10**15], [10**5, 10**5, 10**5], [2**62, 4], [-3, 2], [10**7, 0]])
    m.graph.initializer.append(numpy_helper.from_array(np.array(shape, np.int64), "fuzz_shape"))
    m.graph.node.append(helper.make_node("ConstantOfShape", ["fuzz_shape"], ["fuzz_big"]))
    m.graph.output.append(helper.make_tensor_value_info("fuzz_big", TensorProto.FLOAT, None))
    return m


def shuffle_nodes(m: onnx.ModelProto, rng: np.random.Generator) -> Mutant:
    nodes = list(m.graph.node)
    order = rng.permutation(len(nodes))
    del m.graph.node[:]
    m.graph.node.extend(nodes[i] for i in order)
    return m


def byte_flip(m: onnx.ModelProto, rng: np.random.Generator) -> Mutant:
    data = bytearray(m.SerializeToString())
    for _ in range(int(rng.integers(1, 9))):
        data[int(rng.integers(len(data)))] = int(rng.integers(256))
    return bytes(data)


def truncate(m: onnx.ModelProto, rng: np.random.Generator) -> Mutant:
    data = m.SerializeToString()
    return data[: int(rng.integers(len(data)))]


MUTATIONS: dict[str, Callable[[onnx.ModelProto, np.random.Generator], Mutant]] = {
    "wrong_op_type": wrong_op_type, "drop_input": drop_input, "extra_input": extra_input,
    "extreme_attribute": extreme_attribute, "wrong_initializer_dims": wrong_initializer_dims,
    "input_dims": input_dims, "wrong_dtype": wrong_dtype, "duplicate_output": duplicate_output,
    "missing_initializer": missing_initializer, "bad_versions": bad_versions,
    "external_data_outside": external_data_outside, "nested_if": nested_if,
    "huge_constant_of_shape": huge_constant_of_shape, "shuffle_nodes": shuffle_nodes, "byte_flip": byte_flip,
    "truncate": truncate,
}


def mutate(model: onnx.ModelProto, name: str, rng: np.random.Generator) -> bytes:
    """Serialized bytes of `model` after mutation `name` (byte flips when it does not apply)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    try:
        out = MUTATIONS[name](m, rng)
    except NotApplicable:
        out = byte_flip(model, rng)
    return out if isinstance(out, bytes) else out.SerializeToString()
