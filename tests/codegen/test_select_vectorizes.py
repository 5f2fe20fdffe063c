"""An elementwise select whose arm divides (erf's rational approximation, so GELU) vectorizes: without
-fno-trapping-math gcc kept the select as a branch (it may not speculate a division that could trap), and
the branch kept the loop scalar. A dense's fused GELU ran at 9 ns per element."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import kiln
from tests.codegen.assembly import assembly, task_source


def _gelu():
    """An exact (erf) GELU over a 4 x 256 tensor."""
    graph = helper.make_graph([helper.make_node("Gelu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 256])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def test_erf_gelu_divides_in_vectors(tmp_path):
    asm = assembly(task_source(_gelu(), "gelu"), tmp_path)
    if "vdivps" not in asm and "vdivss" not in asm:
        pytest.skip("the host's compiler emits no AVX divisions (not x86 with AVX)")
    assert "vdivps" in asm and "vdivss" not in asm


def test_gelu_values_keep_nan_and_inf():
    """What the flag must not change: NaN, infinities and signed zeros go through GELU as nn.gelu says."""
    x = np.array([[np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -3.5, 2.0] * 32] * 4, np.float32)
    mod = kiln.from_onnx(_gelu())
    got = kiln.build(mod, opt_level=3).run({"x": x})[0]
    want = kiln.evaluate(mod, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert np.array_equal(np.signbit(got), np.signbit(want))
