"""Sequences and optionals: references, type relations, and sequence models against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from kiln.errors import EvaluationError, TypeInferenceError
from kiln.frontend.onnx import from_onnx
from kiln.ir import ANY, Constant, Function, OptionalType, SeqType, SizeVar, TensorType, Tuple, Var
from kiln.op import get_op
from kiln.op.interpreter import evaluate, run_function, run_op
from kiln.op.sequence import ConcatFromSequenceAttrs, OptionalAttrs, SplitToSequenceAttrs
from tests.helpers import I64, F

ort = pytest.importorskip("onnxruntime")
N = SizeVar("N")


def op(name):
    return get_op(name)


def t(*shape, dtype="float32"):
    return TensorType(shape, dtype)


def test_construct_at_insert_erase_length():
    a, b, c = (np.full((2,), v, np.float32) for v in (1, 2, 3))
    s = run_op(op("seq.construct"), None, [a, b])
    assert [x[0] for x in run_op(op("seq.insert"), None, [s, c, np.array(-1, np.int32)])] == [1, 3, 2]
    assert [x[0] for x in run_op(op("seq.insert"), None, [s, c, None])] == [1, 2, 3]
    assert [x[0] for x in run_op(op("seq.erase"), None, [s, np.array(0, np.int64)])] == [2]
    assert [x[0] for x in run_op(op("seq.erase"), None, [s, None])] == [1]
    assert run_op(op("seq.at"), None, [s, np.array(-2, np.int64)])[0] == 1
    assert run_op(op("seq.length"), None, [s]).dtype == np.int64
    assert s == [a, b]  # references never mutate their inputs
    with pytest.raises(EvaluationError, match="out of range"):
        run_op(op("seq.at"), None, [s, np.array(2, np.int64)])


def test_sequence_type_relations():
    x, y = Var("x", t(N, 3)), Var("y", t(2, 3))
    assert op("seq.construct")(x, x).type == SeqType(t(N, 3))
    s = op("seq.construct")(x, y)
    assert s.type == SeqType(t(ANY, 3))
    assert op("seq.at")(s, Constant(np.array(0, np.int64))).type == t(ANY, 3)
    assert op("seq.length")(s).type == t(dtype="int64")
    empty = op("seq.empty")(dtype="int64")
    assert op("seq.insert")(empty, Var("z", t(4, dtype="int64"))).type == SeqType(TensorType(None, "int64"))
    with pytest.raises(TypeInferenceError, match="do not agree"):
        op("seq.construct")(x, Var("w", t(N, 3, dtype="int64")))
    with pytest.raises(TypeInferenceError, match="position"):
        op("seq.at")(s, Constant(np.array(0.0, np.float32)))
    with pytest.raises(TypeInferenceError, match="sequence"):
        op("seq.length")(x)


@pytest.mark.parametrize("shape,axis,split,keepdims", [
    ((7, 3), 0, None, 1), ((7, 3), 1, None, 0), ((1, 5), -1, 2, 1), ((6, 2), 0, 3, 1),
    ((5, 4, 3), 1, [1, 3], 1), ((11,), 0, [0, 4, 7], 1)])
def test_split_to_sequence_vs_ort(shape, axis, split, keepdims):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    inputs = ["x"] + (["split"] if split is not None else [])
    nodes = [helper.make_node("SplitToSequence", inputs, ["s"], axis=axis, keepdims=keepdims)]
    inits = [] if split is None else [helper.make_tensor("split", I64, np.shape(split), np.ravel(split).tolist())]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, shape)],
                          [helper.make_tensor_value_info("s", 0, None)], inits)
    g.output[0].type.sequence_type.elem_type.tensor_type.elem_type = F
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    ours = evaluate(from_onnx(model), {"x": x})[0]
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert len(ours) == len(ref)
    for o, r in zip(ours, ref):
        np.testing.assert_array_equal(o, r)


def test_split_and_concat_type_relations():
    x = Var("x", t(N, 6))
    split = op("seq.split_to_sequence")
    assert split(x, attrs=SplitToSequenceAttrs(axis=1, keepdims=0)).type == SeqType(t(N))
    assert split(x, Constant(np.array(3, np.int64)), attrs=SplitToSequenceAttrs(axis=1)).type == SeqType(t(N, 3))
    assert split(x, Constant(np.array(4, np.int64)), attrs=SplitToSequenceAttrs(axis=1)).type == SeqType(t(N, ANY))
    assert split(x, Var("k", t(2, dtype="int64")), attrs=SplitToSequenceAttrs()).type == SeqType(t(ANY, 6))
    s = split(x, attrs=SplitToSequenceAttrs(axis=1, keepdims=0))
    concat = op("seq.concat_from_sequence")
    assert concat(s, attrs=ConcatFromSequenceAttrs(axis=-1, new_axis=1)).type == t(N, ANY)
    assert concat(s, attrs=ConcatFromSequenceAttrs(axis=0)).type == t(ANY)
    with pytest.raises(TypeInferenceError, match="out of range"):
        concat(s, attrs=ConcatFromSequenceAttrs(axis=1))
    with pytest.raises(TypeInferenceError, match="split"):
        split(x, Var("k", t(2, 2, dtype="int64")), attrs=SplitToSequenceAttrs())


def test_concat_from_sequence_reference():
    parts = [np.arange(6, dtype=np.int32).reshape(2, 3) + i for i in range(3)]
    concat = op("seq.concat_from_sequence")
    np.testing.assert_array_equal(run_op(concat, ConcatFromSequenceAttrs(axis=1), [parts]), np.concatenate(parts, 1))
    np.testing.assert_array_equal(run_op(concat, ConcatFromSequenceAttrs(axis=-1, new_axis=1), [parts]),
                                  np.stack(parts, -1))


def test_sequence_map_with_a_tensor_argument():
    """map(lambda a, b: (a + b, a), seq, tensor) over elements of different lengths."""
    a, b = Var("a", t(ANY)), Var("b", t(1))
    body = Function((a, b), Tuple((get_op("math.add")(a, b), a)))
    s, bias = Var("s", SeqType(t(ANY))), Var("bias", t(1))
    e = op("seq.map")(body, s, bias)
    assert e.type.fields == (SeqType(t(ANY)), SeqType(t(ANY)))
    elems = [np.arange(n, dtype=np.float32) for n in (1, 2, 5)]
    sums, same = run_function(Function((s, bias), e), [elems, np.ones(1, np.float32)])
    for x, y, z in zip(elems, sums, same):
        np.testing.assert_array_equal(y, x + 1)
        np.testing.assert_array_equal(z, x)
    with pytest.raises(TypeInferenceError, match="sequence"):
        op("seq.map")(body, bias, bias)


def test_optionals():
    x = Var("x", t(N))
    full = op("optional.optional")(x)
    assert full.type == OptionalType(t(N))
    empty = op("optional.optional")(attrs=OptionalAttrs(SeqType(t(3))))
    assert empty.type == OptionalType(SeqType(t(3)))
    assert op("optional.get_element")(full).type == t(N)
    assert op("optional.has_element")().type == t(dtype="bool")
    fn = Function((x,), Tuple((op("optional.has_element")(full), op("optional.has_element")(empty),
                               op("optional.get_element")(full))))
    has, has_not, value = run_function(fn, [np.ones(2, np.float32)])
    assert bool(has) and not bool(has_not) and value.shape == (2,)
    with pytest.raises(TypeInferenceError, match="type"):
        op("optional.optional")(attrs=OptionalAttrs())
    with pytest.raises(EvaluationError, match="empty"):
        run_function(Function((), op("optional.get_element")(empty)), [])
