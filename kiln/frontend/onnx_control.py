"""ONNX converters for control flow: If (the IR node), Loop and Scan (kiln/op/control.py)."""

from __future__ import annotations

import onnx

from kiln.errors import TypeInferenceError
from kiln.frontend.onnx import Context, Node, call, converter, onnx_attrs_to, outputs
from kiln.ir.expr import Expr, Function, If, Tuple, TupleGetItem, Var
from kiln.ir.types import TensorType, Type
from kiln.op.control import GuardAttrs, ScanAttrs, join_carried
from kiln.op.sequence import ConcatFromSequenceAttrs, SplitToSequenceAttrs
from kiln.op.typerel import check_dtype, tensor


def body_function(node: Node, graph: onnx.GraphProto, head: list[Type], carried: list[Type],
                  tail: list[Type], result_offset: int) -> Function:
    """Convert a loop body, widening the carried parameter types until the body's carried
    results flow back into them (a value may change shape from one iteration to the next)."""
    want = len(head) + len(carried) + len(tail)
    if len(graph.input) != want:
        raise node.error(f"the body has {len(graph.input)} inputs; expected {want}")
    ctx: Context = node.ctx
    while True:
        fn = ctx.subgraph_function(graph, head + carried + tail)
        results = fn.type.ret.fields[result_offset:result_offset + len(carried)]
        if len(results) < len(carried):
            raise node.error(f"the body returns {len(fn.type.ret.fields)} values; too few for "
                             f"{len(carried)} loop-carried values")
        widened = [join_carried(c, r) for c, r in zip(carried, results)]
        if widened == carried:
            return fn
        carried = widened


def _branch(node: Node, key: str) -> list[Expr] | TypeInferenceError:
    """A branch's outputs, or the error that shows it cannot type-check for these input types."""
    try:
        return node.ctx.subgraph_outputs(node.attrs[key])
    except TypeInferenceError as e:
        return e


@converter("If")
def _if(node: Node) -> list[Expr]:
    """An If node; when one branch is ill-typed for the static input types, only the other can
    ever succeed, so the If becomes a guard on the condition around that branch."""
    cond = node.inputs[0]
    check_dtype(tensor(cond.type, "condition"), ("bool",), "condition")
    then, other = _branch(node, "then_branch"), _branch(node, "else_branch")
    for bad, good, expect in ((then, other, 0), (other, then, 1)):
        if isinstance(bad, TypeInferenceError):
            if isinstance(good, TypeInferenceError):
                raise bad
            value = good[0] if len(good) == 1 else Tuple(tuple(good))
            guarded = call("control.guard", node, [cond, value], GuardAttrs(expect, str(bad)))
            return [guarded] if len(good) == 1 else outputs(guarded, node.num_outputs)
    if len(then) != len(other) or len(then) < node.num_outputs:
        raise node.error(f"branches return {len(then)} and {len(other)} values for {node.num_outputs} outputs")
    if len(then) == 1:
        return [If(cond, then[0], other[0])]
    return outputs(If(cond, Tuple(tuple(then)), Tuple(tuple(other))), node.num_outputs)


@converter("Loop")
def _loop(node: Node) -> list[Expr]:
    trip, cond, init = node.input(0), node.input(1), node.inputs[2:]
    if any(x is None for x in init):
        raise node.error("loop-carried inputs cannot be omitted")
    head = [TensorType((), "int64"), TensorType((), "bool")]
    body = body_function(node, node.attrs["body"], head, [x.type for x in init], [], 1)
    return outputs(call("control.loop", node, [body, trip, cond, *init]), node.num_outputs)


def _slice_type(t: Type, axis: int) -> TensorType:
    """Type of one slice of a scan input along `axis`."""
    t = tensor(t, "scan input")
    if t.shape is None:
        return TensorType(None, t.dtype)
    axis %= len(t.shape)
    return TensorType(t.shape[:axis] + t.shape[axis + 1:], t.dtype)


def _scan9(node: Node, inputs: list[Expr], attrs: ScanAttrs) -> list[Expr]:
    n = len(inputs) - attrs.num_scan_inputs
    if n < 0 or attrs.num_scan_inputs < 1:
        raise node.error(f"num_scan_inputs={attrs.num_scan_inputs} does not fit {len(inputs)} inputs")
    axes = attrs.scan_input_axes or (0,) * attrs.num_scan_inputs
    slices = [_slice_type(x.type, a) for x, a in zip(inputs[n:], axes)]
    body = body_function(node, node.attrs["body"], [], [x.type for x in inputs[:n]], slices, 0)
    res = call("control.scan", node, [body, *inputs], attrs)
    return outputs(res, len(res.type.fields))


@converter("Scan")
def _scan(node: Node) -> list[Expr]:
    if node.opset >= 9:
        return _scan9(node, list(node.inputs), onnx_attrs_to("control.scan", node, drop=("body",)))
    return _scan8(node)


def _scan8(node: Node) -> list[Expr]:
    """Scan-8 has a batch axis 0 on every input and output: map a Scan-9 over the batch.

    Each input is split into a sequence of batch rows, seq.map runs the Scan-9 per row, and each
    result sequence is stacked back along axis 0."""
    if node.input(0) is not None:
        raise node.error("Scan-8 sequence_lens is not supported (only full-length sequences)")
    inputs = node.inputs[1:]
    attrs = ScanAttrs(num_scan_inputs=node.attrs["num_scan_inputs"],
                      scan_input_directions=node.attrs.get("directions"))
    rows = [Var(f"row{i}", _slice_type(x.type, 0)) for i, x in enumerate(inputs)]
    per_row = _scan9(node, list(rows), attrs)
    row_fn = Function(tuple(rows), Tuple(tuple(per_row)))
    split = SplitToSequenceAttrs(axis=0, keepdims=0)
    seqs = [call("seq.split_to_sequence", node, [x], split) for x in inputs]
    mapped = call("seq.map", node, [row_fn, *seqs])
    stack = ConcatFromSequenceAttrs(axis=0, new_axis=1)
    return [call("seq.concat_from_sequence", node, [TupleGetItem(mapped, j)], stack)
            for j in range(len(per_row))]
