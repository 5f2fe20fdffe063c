"""Small builders for tests: ONNX models, and one-operator IR modules."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def model(nodes, inputs, outputs, inits=(), opset: int = 21, ir_version: int = 10) -> onnx.ModelProto:
    """A checked ModelProto; inputs/outputs are (name, elem_type, shape) triples."""
    g = helper.make_graph(
        nodes, "test",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = ir_version
    return m


F, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def one_op_module(name: str, arrays: Sequence[np.ndarray | None], attrs: Any = None, const: Sequence[int] = (),
                  dim: Callable[[int, int], Any] = lambda k, axis: None, **kw_attrs) -> Any:
    """main(x{k}...) = name(inputs): input k is absent when arrays[k] is None, a Constant when k is in
    `const`, else parameter x{k} shaped like arrays[k] except where dim(k, axis) gives a symbolic
    dim (a SizeVar or ANY). Attributes come as an attrs object or as keywords."""
    from kiln.ir import Function, IRModule, Var
    from kiln.ir.dtype import from_numpy
    from kiln.ir.expr import Constant, absent
    from kiln.ir.types import TensorType
    from kiln.op import get_op

    params, args = [], []
    for k, a in enumerate(arrays):
        if a is None:
            args.append(absent())
        elif k in const:
            args.append(Constant(a))
        else:
            shape = tuple(n if dim(k, ax) is None else dim(k, ax) for ax, n in enumerate(a.shape))
            params.append(Var(f"x{k}", TensorType(shape, from_numpy(a.dtype))))
            args.append(params[-1])
    call = get_op(name)(*args, attrs=attrs) if attrs is not None else get_op(name)(*args, **kw_attrs)
    return IRModule({"main": Function(tuple(params), call)})


def op_names(mod: Any) -> list[str]:
    """The operator names of every call in `mod`'s functions, fused groups included, in post order."""
    from kiln.ir.expr import Call
    from kiln.ir.visitor import post_order

    return [getattr(e.op, "name", "") for f in mod.functions.values() for e in post_order(f) if isinstance(e, Call)]


def matmul_chain(layers: int = 16, rows: int = 256, width: int = 512) -> onnx.ModelProto:
    """x -> (MatMul, Relu) x layers, fixed-seed weights: 16 GEMMs of 256x512x512 are 2.1 GFLOP, tens of ms on
    two cores, long enough that a cancel or an RT request a millisecond in lands mid-run."""
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i in range(layers):
        w = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes += [helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"]),
                  helper.make_node("Relu", [f"m{i}"], [f"r{i}"])]
        prev = f"r{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"]))
    return model(nodes, [("x", F, [rows, width])], [("y", F, [rows, width])], inits)
