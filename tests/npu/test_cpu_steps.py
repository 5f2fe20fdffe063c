"""CPU steps of an npu-sim model run as Kiln's compiled C kernels (one library), not the operators'
references, with the transfers between CPU and accelerator still counted."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import kiln
from kiln.npu.cpu_steps import CpuSteps
from kiln.npu.run_report import run_report


def _mixed_model() -> onnx.ModelProto:
    """conv -> sigmoid, concat with the conv, resize x2, conv, softmax: four ops the accelerator cannot run."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.2, n)
               for n, s in (("w1", (8, 3, 3, 3)), ("w2", (6, 16, 3, 3)))]
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["c1"], ["s"]),
             helper.make_node("Concat", ["c1", "s"], ["cat"], axis=1),
             helper.make_node("Resize", ["cat", "", "scales"], ["up"], mode="nearest"),
             helper.make_node("Conv", ["up", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Softmax", ["c2"], ["y"], axis=1)]
    graph = helper.make_graph(nodes, "mixed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 3, 9, 7))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 6, 18, 14))],
                              [*weights, scales])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_cpu_steps_run_in_the_c_library_with_transfers_counted():
    mod = kiln.from_onnx(_mixed_model())
    built = kiln.build(mod, "npu-sim")
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 3, 9, 7)).astype(np.float32)}
    got = built.run(feeds)[0]
    np.testing.assert_allclose(got, kiln.evaluate(mod, feeds)[0], rtol=1e-5, atol=1e-6)
    runner = built.runner
    assert isinstance(runner.cpu, CpuSteps) and runner.cpu.on_host == []  # no group on the references
    assert runner.library is not None and runner.kernels
    cost = runner.last_run
    assert (len(cost.kernels), cost.cpu_steps, cost.cpu_regions) == (2, 4, 2)
    assert cost.transfers == 4  # x in, conv out, the resized map in, conv out
    assert "CPU steps: 4 (2 run(s) of the C library); transfers" in "\n".join(run_report(built, with_effects=False))


def test_a_model_all_on_the_accelerator_builds_no_cpu_library():
    x = kiln.ir.Var("x", kiln.ir.types.TensorType((1, 4, 5, 5), "float32"))
    w = kiln.ir.Constant(np.ones((4, 4, 1, 1), np.float32))
    mod = kiln.ir.IRModule({"main": kiln.ir.Function((x,), kiln.op.get_op("nn.conv")(x, w))})
    built = kiln.build(mod, "npu-sim")
    assert built.runner.cpu is None and built.runner.library is None
