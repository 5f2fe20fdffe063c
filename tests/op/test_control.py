"""Control flow: Loop, Scan (references and type relations), If import, checked against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from kiln.errors import EvaluationError, TypeInferenceError
from kiln.frontend.onnx import from_onnx
from kiln.ir import ANY, Constant, Function, OptionalType, SeqType, SizeVar, TensorType, Tuple, Var
from kiln.ir.expr import absent
from kiln.op import get_op
from kiln.op.control import ScanAttrs, join_carried
from kiln.op.interpreter import evaluate, run_function
from tests.helpers import BOOL, I64, F

ort = pytest.importorskip("onnxruntime")
add, loop, scan = get_op("math.add"), get_op("control.loop"), get_op("control.scan")


def run_both(model: onnx.ModelProto, feeds: dict) -> tuple[list, list]:
    """Kiln's and onnxruntime's outputs for one model."""
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return evaluate(from_onnx(model), feeds), sess.run(None, feeds)


def graph_model(node, inputs, outputs, opset=21):
    g = helper.make_graph([node], "g", inputs, outputs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def accumulate_body(shape=(3,)) -> Function:
    """(i, cond, acc) -> (cond, acc + x, acc + x): x is captured from outside as a constant."""
    i, c, acc = Var("i", TensorType((), "int64")), Var("c", TensorType((), "bool")), Var("acc", TensorType(shape, "float32"))
    nxt = add(acc, Constant(np.ones(shape, np.float32)))
    return Function((i, c, acc), Tuple((c, nxt, nxt)))


# ---------------------------------------------------------------------------------------------
# Loop


@pytest.mark.parametrize("trips", [0, 1, 7])
def test_loop_for_counts_and_stacks(trips):
    body = accumulate_body()
    x = Var("x", TensorType((3,), "float32"))
    e = loop(body, Constant(np.array(trips, np.int64)), absent(), x)
    assert e.type.fields == (TensorType((3,), "float32"), TensorType((trips, 3), "float32"))
    final, stacked = run_function(Function((x,), e), [np.zeros(3, np.float32)])
    np.testing.assert_array_equal(final, np.full(3, trips, np.float32))
    assert stacked.shape == (trips, 3) and stacked.dtype == np.float32
    np.testing.assert_array_equal(stacked[:, 0], np.arange(1, trips + 1, dtype=np.float32))


def test_loop_dynamic_trip_count_is_unknown_dim():
    m = Var("m", TensorType((), "int64"))
    e = loop(accumulate_body(), m, Constant(np.array(True)), Var("x", TensorType((3,), "float32")))
    assert e.type.fields[1] == TensorType((ANY, 3), "float32")


def test_loop_type_errors():
    x = Var("x", TensorType((3,), "float32"))
    with pytest.raises(TypeInferenceError, match="trip count"):
        loop(accumulate_body(), Constant(np.array(2.0, np.float32)), absent(), x)
    with pytest.raises(TypeInferenceError, match="parameters"):
        loop(accumulate_body(), Constant(np.array(2, np.int64)), absent(), x, x)
    with pytest.raises(TypeInferenceError, match="body expects"):
        loop(accumulate_body(), Constant(np.array(2, np.int64)), absent(), Var("y", TensorType((3,), "int64")))


def test_join_carried():
    a, b = TensorType((1,), "float32"), TensorType((SizeVar("N"),), "float32")
    assert join_carried(a, b) == TensorType((ANY,), "float32")
    seq = SeqType(TensorType(None, "float32"))
    assert join_carried(OptionalType(seq), seq) == OptionalType(seq)
    with pytest.raises(TypeInferenceError):
        join_carried(a, TensorType((1,), "int64"))


def _while_model():
    """while (cond && i < M) { y = y + x; cond = y < limit } with a carried value whose shape grows
    from [1] to [4] on the first iteration (the body's parameter type must be widened)."""
    x = helper.make_tensor("x", F, [4], [1.0, 2.0, 3.0, 4.0])
    body = helper.make_graph(
        [helper.make_node("Add", ["y_in", "x"], ["y_out"]),
         helper.make_node("ReduceSum", ["y_out"], ["total"], keepdims=0),
         helper.make_node("Less", ["total", "limit"], ["cond_out"])],
        "body", [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("c", BOOL, []),
                 helper.make_tensor_value_info("y_in", F, [None])],
        [helper.make_tensor_value_info("cond_out", BOOL, []), helper.make_tensor_value_info("y_out", F, [None]),
         helper.make_tensor_value_info("y_out", F, [None])], [x])
    node = helper.make_node("Loop", ["M", "cond", "y"], ["y_final", "ys"], body=body)
    return graph_model(node, [helper.make_tensor_value_info("M", I64, []), helper.make_tensor_value_info("cond", BOOL, []),
                              helper.make_tensor_value_info("y", F, [1]), helper.make_tensor_value_info("limit", F, [])],
                       [helper.make_tensor_value_info("y_final", F, [None]), helper.make_tensor_value_info("ys", F, [None, None])])


@pytest.mark.parametrize("m,cond,limit", [(10, True, 30.0), (2, True, 1e9), (5, False, 1e9), (0, True, 1.0)])
def test_loop_while_vs_ort(m, cond, limit):
    model = _while_model()
    mod = from_onnx(model)
    assert mod.main.body.fields[0].type == TensorType((ANY,), "float32")
    feeds = {"M": np.array(m, np.int64), "cond": np.array(cond), "y": np.zeros(1, np.float32),
             "limit": np.array(limit, np.float32)}
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ours, ref = evaluate(mod, feeds), sess.run(None, feeds)
    np.testing.assert_allclose(ours[0], ref[0])
    if ref[1].size:
        np.testing.assert_allclose(ours[1], ref[1])
    else:
        assert ours[1].size == 0


# ---------------------------------------------------------------------------------------------
# Scan


def _cumsum_body(width) -> Function:
    s, x = Var("s", TensorType((width,), "float32")), Var("x", TensorType((width,), "float32"))
    nxt = add(s, x)
    return Function((s, x), Tuple((nxt, nxt)))


def test_scan_type_relation_symbolic():
    n = SizeVar("T")
    e = scan(_cumsum_body(5), Var("s", TensorType((5,), "float32")), Var("x", TensorType((5, n), "float32")),
             attrs=ScanAttrs(1, scan_input_axes=(1,), scan_output_axes=(-1,)))
    assert e.type.fields == (TensorType((5,), "float32"), TensorType((5, n), "float32"))
    with pytest.raises(TypeInferenceError, match="scan_input_axes"):
        scan(_cumsum_body(5), Var("s", TensorType((5,), "float32")), Var("x", TensorType((n, 5), "float32")),
             attrs=ScanAttrs(1, scan_input_axes=(0, 1)))


@pytest.mark.parametrize("in_axis,in_dir,out_axis,out_dir", [(0, 0, 0, 0), (1, 1, 1, 0), (-1, 0, -1, 1), (0, 1, 1, 1)])
def test_scan_vs_ort(in_axis, in_dir, out_axis, out_dir):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 7) if in_axis == 0 else (7, 5)).astype(np.float32)
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]), helper.make_node("Add", ["s_out", "x_t"], ["y_t"])],
        "body", [helper.make_tensor_value_info("s_in", F, [7]), helper.make_tensor_value_info("x_t", F, [7])],
        [helper.make_tensor_value_info("s_out", F, [7]), helper.make_tensor_value_info("y_t", F, [7])])
    node = helper.make_node("Scan", ["s", "x"], ["s_final", "y"], body=body, num_scan_inputs=1,
                            scan_input_axes=[in_axis], scan_input_directions=[in_dir],
                            scan_output_axes=[out_axis], scan_output_directions=[out_dir])
    model = graph_model(node, [helper.make_tensor_value_info("s", F, [7]), helper.make_tensor_value_info("x", F, x.shape)],
                        [helper.make_tensor_value_info("s_final", F, [7]), helper.make_tensor_value_info("y", F, [None, None])])
    ours, ref = run_both(model, {"s": np.zeros(7, np.float32), "x": x})
    for o, r in zip(ours, ref):
        np.testing.assert_allclose(o, r, rtol=1e-5)


def test_scan8_batched_vs_ort():
    rng = np.random.default_rng(1)
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]), helper.make_node("Add", ["s_out", "s_out"], ["y_t"])],
        "body", [helper.make_tensor_value_info("s_in", F, [2]), helper.make_tensor_value_info("x_t", F, [2])],
        [helper.make_tensor_value_info("s_out", F, [2]), helper.make_tensor_value_info("y_t", F, [2])])
    node = helper.make_node("Scan", ["", "s", "x"], ["s_final", "y"], body=body, num_scan_inputs=1, directions=[1])
    model = graph_model(node, [helper.make_tensor_value_info("s", F, [3, 2]),
                               helper.make_tensor_value_info("x", F, [3, 5, 2])],
                        [helper.make_tensor_value_info("s_final", F, [3, 2]), helper.make_tensor_value_info("y", F, [3, 5, 2])],
                        opset=8)
    model.ir_version = 3
    feeds = {"s": rng.standard_normal((3, 2)).astype(np.float32), "x": rng.standard_normal((3, 5, 2)).astype(np.float32)}
    ours, ref = run_both(model, feeds)
    for o, r in zip(ours, ref):
        np.testing.assert_allclose(o, r, rtol=1e-5)


# ---------------------------------------------------------------------------------------------
# If


def _if_model(then_out: str, else_out: str, shape_x, shape_y):
    def branch(name, out):
        return helper.make_graph([helper.make_node("Add", [out, out], [f"{name}_o"])], name, [],
                                 [helper.make_tensor_value_info(f"{name}_o", F, [None])])

    node = helper.make_node("If", ["c"], ["r"], then_branch=branch("t", then_out), else_branch=branch("e", else_out))
    return graph_model(node, [helper.make_tensor_value_info("c", BOOL, []), helper.make_tensor_value_info("x", F, shape_x),
                              helper.make_tensor_value_info("y", F, shape_y)],
                       [helper.make_tensor_value_info("r", F, [None])])


@pytest.mark.parametrize("cond", [True, False])
def test_if_joins_branch_types(cond):
    model = _if_model("x", "y", [2, 3], [2, 5])
    mod = from_onnx(model)
    assert mod.main.body.fields[0].type == TensorType((2, ANY), "float32")
    feeds = {"c": np.array(cond), "x": np.ones((2, 3), np.float32), "y": np.full((2, 5), 2, np.float32)}
    np.testing.assert_array_equal(evaluate(mod, feeds)[0], (feeds["x"] if cond else feeds["y"]) * 2)


def test_if_with_ill_typed_branch_becomes_guard():
    """The else branch (x + y of shapes [2] and [3]) can never run: the If checks the condition."""
    def branch(name, a, b):
        return helper.make_graph([helper.make_node("Add", [a, b], [f"{name}_o"])], name, [],
                                 [helper.make_tensor_value_info(f"{name}_o", F, [None])])

    node = helper.make_node("If", ["c"], ["r"], then_branch=branch("t", "x", "x"), else_branch=branch("e", "x", "y"))
    model = graph_model(node, [helper.make_tensor_value_info("c", BOOL, []), helper.make_tensor_value_info("x", F, [2]),
                               helper.make_tensor_value_info("y", F, [3])], [helper.make_tensor_value_info("r", F, [None])])
    mod = from_onnx(model)
    feeds = {"x": np.ones(2, np.float32), "y": np.ones(3, np.float32)}
    np.testing.assert_array_equal(evaluate(mod, {**feeds, "c": np.array(True)})[0], [2, 2])
    with pytest.raises(EvaluationError, match="cannot run"):
        evaluate(mod, {**feeds, "c": np.array(False)})
