"""ONNX converters for sequences and optionals (kiln/op/sequence.py)."""

from __future__ import annotations

from kiln.frontend.onnx import Node, call, converter, outputs, simple, type_from_proto
from kiln.ir import dtype as dt
from kiln.ir.expr import Expr
from kiln.ir.types import SeqType
from kiln.op.sequence import OptionalAttrs, SequenceEmptyAttrs

simple("SequenceConstruct", "seq.construct")
simple("SequenceAt", "seq.at")
simple("SequenceInsert", "seq.insert")
simple("SequenceErase", "seq.erase")
simple("SequenceLength", "seq.length")
simple("SplitToSequence", "seq.split_to_sequence")
simple("ConcatFromSequence", "seq.concat_from_sequence")
simple("OptionalHasElement", "optional.has_element")
simple("OptionalGetElement", "optional.get_element")


@converter("SequenceEmpty")
def _sequence_empty(node: Node) -> Expr:
    return call("seq.empty", node, [], SequenceEmptyAttrs(dt.from_onnx(node.attrs.get("dtype", 1))))


@converter("Optional")
def _optional(node: Node) -> Expr:
    tp = node.attrs.get("type")
    t = None if tp is None else type_from_proto(tp, f"node '{node.name}' attribute 'type'")
    return call("optional.optional", node, node.inputs, OptionalAttrs(t))


@converter("SequenceMap")
def _sequence_map(node: Node) -> list[Expr]:
    params = [x.type.elem if isinstance(x.type, SeqType) else x.type for x in node.inputs]
    graph = node.attrs["body"]
    if len(graph.input) != len(params):
        raise node.error(f"the body has {len(graph.input)} inputs; expected {len(params)}")
    body = node.ctx.subgraph_function(graph, params)
    return outputs(call("seq.map", node, [body, *node.inputs]), node.num_outputs)
