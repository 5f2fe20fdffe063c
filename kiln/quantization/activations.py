"""Intermediate values of a model, computed by Kiln's reference interpreter.

The model is imported once with every tensor asked for added to its graph outputs, so the interpreter
hands back exactly the values the ONNX graph names (no mapping from fused or rewritten IR back to
ONNX names is needed), then run on each feed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import onnx
from onnx import TensorProto, helper

from kiln.frontend.onnx import from_onnx
from kiln.ir.module import IRModule
from kiln.op.interpreter import evaluate


def float_tensors(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    """The float32 tensors graph inputs and nodes carry, by name, as ONNX shape inference types them.

    A tensor whose type inference cannot find is left out: only tensors known to be float are quantized."""
    inferred = onnx.shape_inference.infer_shapes(model).graph
    inits = {t.name for t in model.graph.initializer}
    produced = {o for n in model.graph.node for o in n.output if o} | {i.name for i in model.graph.input}
    typed = [*inferred.input, *inferred.value_info, *inferred.output]
    return {vi.name: vi for vi in typed if vi.type.tensor_type.elem_type == TensorProto.FLOAT
            and vi.name in produced and vi.name not in inits}


def exposing(model: onnx.ModelProto, names: Iterable[str]) -> IRModule:
    """The model imported with `names` (float tensors produced by its nodes) among its outputs."""
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    have = {o.name for o in model.graph.output} | {i.name for i in model.graph.input}
    exposed.graph.output.extend(_float_output(n) for n in sorted(set(names) - have))
    return from_onnx(exposed)


def _float_output(name: str) -> onnx.ValueInfoProto:
    """A float32 graph output of unknown shape (the checker wants a shape field; Kiln's import reads none)."""
    vi = helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
    vi.type.tensor_type.shape.SetInParent()
    return vi


def run_all(mod: IRModule, feeds: Iterable[dict[str, np.ndarray]]) -> Iterator[dict[str, np.ndarray]]:
    """Every output and input of `mod` by name, one dict per feed."""
    for feed in feeds:
        values = dict(zip(mod.output_names, evaluate(mod, feed)))
        yield {**feed, **values}
