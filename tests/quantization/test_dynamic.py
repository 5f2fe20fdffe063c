"""Dynamic quantization of a transformer block and an MLP: MatMul/Gemm weights int8 ahead of time,
activations at run time, runnable by ONNX Runtime and by Kiln."""

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import kiln
from kiln.models import bert_tiny
from tests.quantization.models import cosine, ort_run, small_mlp


@pytest.fixture(scope="module")
def bert():
    return bert_tiny(batch=1)


@pytest.fixture(scope="module")
def bert_int8(bert):
    return kiln.quantize(bert, dynamic=True).model


def ids(seed):
    return {"input_ids": np.random.default_rng(seed).integers(0, 1000, (1, 16)).astype(np.int64)}


def test_every_weight_matmul_becomes_an_integer_matmul(bert, bert_int8):
    onnx.checker.check_model(bert_int8)
    weights = {t.name for t in bert.graph.initializer}
    float_matmuls = [n for n in bert.graph.node if n.op_type == "MatMul" and n.input[1] in weights]
    ops = [n.op_type for n in bert_int8.graph.node]
    assert ops.count("MatMulInteger") == ops.count("DynamicQuantizeLinear") == len(float_matmuls) == 12
    assert ops.count("MatMul") == 4  # attention's activation x activation products stay float
    stored = {t.name: t for t in bert_int8.graph.initializer}
    for n in bert_int8.graph.node:
        if n.op_type == "MatMulInteger":
            assert stored[n.input[1]].data_type == onnx.TensorProto.INT8


def test_kiln_and_onnx_runtime_run_it_close_to_the_float_model(bert, bert_int8):
    mod = kiln.from_onnx(bert_int8)
    for seed in range(3):
        f = ort_run(bert, ids(seed))[0]
        ours, theirs = kiln.evaluate(mod, ids(seed))[0], ort_run(bert_int8, ids(seed))[0]
        assert cosine(f, ours) > 0.999
        # NOTE: looser for ONNX Runtime: without VNNI its u8 x s8 kernels saturate in int16
        assert cosine(f, theirs) > 0.99 and cosine(ours, theirs) > 0.99


def test_gemm_with_transposed_weights_alpha_and_beta():
    model = small_mlp()
    for node in model.graph.node:
        if node.op_type == "Gemm":
            node.attribute.extend([onnx.helper.make_attribute("alpha", 0.5), onnx.helper.make_attribute("beta", 2.0)])
    q = kiln.quantize(model, dynamic=True).model
    assert [n.op_type for n in q.graph.node].count("MatMulInteger") == 3
    x = {"input": np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)}
    f, ours = ort_run(model, x)[0], kiln.evaluate(kiln.from_onnx(q), x)[0]
    assert np.abs(f - ours).max() < 0.02 * np.abs(f).max()


def test_per_channel_scales_are_per_output_column():
    model = small_mlp()
    q = kiln.quantize(model, dynamic=True).model
    stored = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer}
    w = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "fc0.weight"))  # [128, 64]
    scale = next(v for k, v in stored.items() if k.startswith("fc0") and k.endswith("weight_scale"))
    np.testing.assert_allclose(scale, np.abs(w).max(axis=1) / 127, rtol=1e-6)
    per_tensor = kiln.quantize(model, dynamic=True, per_channel=False).model
    scales = [numpy_helper.to_array(t) for t in per_tensor.graph.initializer if t.name.endswith("weight_scale")]
    assert all(s.shape == () for s in scales)
