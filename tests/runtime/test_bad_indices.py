"""A gathered index outside its axis is a clear error from compiled kernels (AOT, graph executor, a
saved model), never a read outside the tensor: kiln_check_index sets the kernel's error flag."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import kiln
from kiln.errors import KernelError
from tests.helpers import I64, F, model


def _gather_model(op: str, **attrs):
    return model([helper.make_node(op, ["x", "i"], ["y"], name="pick", **attrs)],
                 [("x", F, [4, 3]), ("i", I64, [2, 3] if op == "GatherElements" else [2])], [("y", F, [2, 3])],
                 opset=17)


@pytest.mark.parametrize("executor", ["aot", "graph"])
@pytest.mark.parametrize("op, good, bad", [
    ("Gather", [1, -4], [4, 0]),
    ("Gather", [3, 0], [-5, 1]),
    ("Gather", [0, 0], [1 << 40, 0]),  # far outside: would fault, not just read garbage
    ("GatherElements", [[0, 1, 2], [-1, -2, 3]], [[0, 1, 2], [0, 4, 0]]),
])
def test_out_of_range_index_names_the_node(executor, op, good, bad):
    m = _gather_model(op)
    sess = kiln.InferenceSession(kiln.build(m, executor=executor))
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    ok = sess.run(None, {"x": x, "i": np.array(good)})[0]
    np.testing.assert_array_equal(ok, kiln.evaluate(kiln.from_onnx(m), {"x": x, "i": np.array(good)})[0])
    with pytest.raises(KernelError, match="index is out of range") as err:
        sess.run(None, {"x": x, "i": np.array(bad)})
    assert "node 'pick'" in str(err.value)
    again = sess.run(None, {"x": x, "i": np.array(good)})[0]  # the flag is per run
    np.testing.assert_array_equal(again, ok)


def test_gather_nd_and_a_saved_model(tmp_path):
    m = model([helper.make_node("GatherND", ["x", "i"], ["y"], name="nd")],
              [("x", F, [4, 3]), ("i", I64, [2, 2])], [("y", F, [2])], opset=17)
    kiln.build(m, executor="aot").export(tmp_path / "m")
    sess = kiln.load(tmp_path / "m")
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.testing.assert_array_equal(sess.run(None, {"x": x, "i": np.array([[3, 2], [-1, -3]])})[0], [11, 9])
    with pytest.raises(KernelError, match="out of range") as err:
        sess.run(None, {"x": x, "i": np.array([[3, 3], [0, 0]])})
    assert "tensor.gather_nd node 'nd'" in str(err.value)  # the saved model keeps the node names


def test_array_feature_extractor_checks_run_time_indices():
    m = helper.make_model(helper.make_graph(
        [helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], domain="ai.onnx.ml", name="afe")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5]),
         helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    sess = kiln.InferenceSession(kiln.build(m))
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    np.testing.assert_array_equal(sess.run(None, {"x": x, "i": np.array([4, -5])})[0], [[4, 0], [9, 5]])
    with pytest.raises(KernelError, match="out of range"):
        sess.run(None, {"x": x, "i": np.array([5, 0])})


@pytest.mark.parametrize("op, shape, good, bad", [
    ("ScatterElements", [2, 3], [[0, 1, 2], [3, -4, 1]], [[0, 4, 0], [0, 0, 0]]),
    ("ScatterND", [2, 1], [[3], [-4]], [[0], [-5]]),
])
def test_scatter_reports_bad_indices(op, shape, good, bad):
    upd_shape = shape if op == "ScatterElements" else [2, 3]
    m = model([helper.make_node(op, ["x", "i", "u"], ["y"], name="put")],
              [("x", F, [4, 3]), ("i", I64, shape), ("u", F, upd_shape)], [("y", F, [4, 3])], opset=18)
    sess = kiln.InferenceSession(kiln.build(m))
    x = np.zeros((4, 3), np.float32)
    u = np.arange(1, 7, dtype=np.float32).reshape(upd_shape)
    feeds = {"x": x, "i": np.array(good), "u": u}
    np.testing.assert_array_equal(sess.run(None, feeds)[0], kiln.evaluate(kiln.from_onnx(m), feeds)[0])
    with pytest.raises(KernelError, match="out of range") as err:
        sess.run(None, {**feeds, "i": np.array(bad)})
    assert "node 'put'" in str(err.value)
