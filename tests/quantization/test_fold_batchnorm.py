"""Batch norms fold into the convs before them, computing the same values; a conv whose output is read
elsewhere too keeps its norm."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from kiln.models import small_cnn
from kiln.quantization.fold_batchnorm import fold_batchnorm
from tests.quantization.models import images, ort_run


def test_folded_cnn_computes_the_same():
    model = small_cnn(batch=1)
    folded = fold_batchnorm(model)
    onnx.checker.check_model(folded)
    ops = [n.op_type for n in folded.graph.node]
    assert "BatchNormalization" not in ops and ops.count("Conv") == 4
    assert not any(t.name == "stem.w" for t in folded.graph.initializer)  # the unfolded weight is dropped
    x = {"image": images(1)[0]}
    np.testing.assert_allclose(ort_run(folded, x)[0], ort_run(model, x)[0], rtol=1e-5, atol=1e-6)


def test_a_conv_read_twice_keeps_its_norm():
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("w", (2, 2, 1, 1)), ("g", (2,)), ("b", (2,)), ("m", (2,)))]
    inits.append(numpy_helper.from_array(np.ones(2, np.float32), "v"))
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"]),
         helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["n"]),
         helper.make_node("Add", ["c", "n"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 2, 2])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert fold_batchnorm(model) is model
