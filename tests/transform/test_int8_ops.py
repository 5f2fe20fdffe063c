"""The int8-ops pass: which quantized patterns become quant.qgemm, which stay as they were, and that
either way the model computes what it did."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln
from kiln.compiler.fuse import fuse
from kiln.errors import KilnError
from kiln.ir.printer import text
from kiln.target import Target
from kiln.transform.infra import PassContext
from kiln.transform.int8_ops import choose_kernel

RNG = np.random.default_rng(0)
AVX2 = {"int8_ops.avx2": True}  # the AVX2 kernels on too (off by default: kiln/transform/int8_ops.py says why)


def _model(nodes, inputs, outputs, inits):
    graph = helper.make_graph(nodes, "g", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _qdq_matmul(w: np.ndarray, w_zp: np.ndarray, x_dtype=TensorProto.UINT8, with_second_user: bool = False):
    """y = Q(DQ(x) @ DQ(w)) [and DQ(x) @ DQ(w) as a second output]."""
    k, n = w.shape
    inits = {"xs": np.float32(0.02), "xz": np.asarray(3, np.uint8 if x_dtype == TensorProto.UINT8 else np.int8),
             "w": w, "ws": np.full(n, 0.01, np.float32), "wz": w_zp, "ys": np.float32(0.05), "yz": np.uint8(128)}
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=1),
             helper.make_node("MatMul", ["xf", "wf"], ["mm"]),
             helper.make_node("QuantizeLinear", ["mm", "ys", "yz"], ["y"])]
    outs = [helper.make_tensor_value_info("y", TensorProto.UINT8, [5, n])]
    if with_second_user:
        outs.append(helper.make_tensor_value_info("mm", TensorProto.FLOAT, [5, n]))
    return _model(nodes, [helper.make_tensor_value_info("x", x_dtype, [5, k])], outs, inits)


def _qgemms(model, target: str | None = None) -> int:
    ctx = PassContext(opt_level=3, target=Target.parse(target) if target else Target.host(), config=AVX2)
    return text(fuse(kiln.from_onnx(model), 3, ctx)).count("quant.qgemm(")


def _same_as_float_path(model, x: np.ndarray) -> None:
    got = kiln.build(model, pass_config=AVX2).run({"x": x})
    plain = kiln.build(model, disabled_passes=["int8-ops"]).run({"x": x})
    for g, p in zip(got, plain):
        assert np.abs(np.asarray(g).astype(np.float64) - np.asarray(p).astype(np.float64)).max() <= 1 + 1e-3 * abs(
            np.asarray(p, np.float64)).max()


def _within_one_lsb_of_ort(model, x: np.ndarray) -> None:
    """Against ONNX Runtime: on AVX2 without VNNI its uint8 x int8 kernel saturates vpmaddubsw (off by tens
    of LSB on full-range weights), so tests that use this keep weights in 7 bits, where ORT is exact."""
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = np.asarray(kiln.build(model, pass_config=AVX2).run({"x": x})[0])
    assert np.abs(got.astype(np.int32) - want.astype(np.int32)).max() <= 1


def test_qdq_matmul_becomes_one_requantizing_qgemm():
    model = _qdq_matmul(RNG.integers(-128, 128, (13, 7)).astype(np.int8), np.zeros(7, np.int8))
    assert _qgemms(model) == 1
    _same_as_float_path(model, RNG.integers(0, 256, (5, 13)).astype(np.uint8))


def test_int8_activations():
    model = _qdq_matmul(RNG.integers(-128, 128, (13, 7)).astype(np.int8), np.zeros(7, np.int8), TensorProto.INT8)
    assert _qgemms(model) == 1
    _same_as_float_path(model, RNG.integers(-128, 128, (5, 13)).astype(np.int8))


def test_a_product_with_another_user_keeps_its_float_output():
    model = _qdq_matmul(RNG.integers(-128, 128, (13, 7)).astype(np.int8), np.zeros(7, np.int8),
                        with_second_user=True)
    fused = text(fuse(kiln.from_onnx(model), 3, PassContext(opt_level=3, config=AVX2)))
    assert fused.count("quant.qgemm(") == 1 and "quant.quantize_linear" in fused
    _same_as_float_path(model, RNG.integers(0, 256, (5, 13)).astype(np.uint8))


def test_uint8_weights_beyond_int8_after_their_zero_point_stay_float():
    w = RNG.integers(0, 256, (13, 7)).astype(np.uint8)
    model = _qdq_matmul(w, np.zeros(7, np.uint8))
    assert _qgemms(model) == 0
    _same_as_float_path(model, RNG.integers(0, 256, (5, 13)).astype(np.uint8))


def test_no_rewrite_for_a_cpu_without_avx2():
    model = _qdq_matmul(RNG.integers(-128, 128, (13, 7)).astype(np.int8), np.zeros(7, np.int8))
    assert _qgemms(model, "c -arch=x86_64 -features=sse,sse2") == 0


def test_grouped_convolution_stays_float():
    w = RNG.integers(-128, 128, (4, 1, 3, 3)).astype(np.int8)
    inits = {"xs": np.float32(0.02), "xz": np.uint8(3), "w": w, "ws": np.full(4, 0.01, np.float32),
             "wz": np.zeros(4, np.int8)}
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=0),
             helper.make_node("Conv", ["xf", "wf"], ["y"], group=4, pads=[1, 1, 1, 1])]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 4, 5, 5])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5, 5])], inits)
    assert _qgemms(model) == 0


@pytest.mark.parametrize("x_dtype", [TensorProto.UINT8, TensorProto.INT8])
def test_qlinear_matmul_within_one_lsb(x_dtype):
    npx = np.uint8 if x_dtype == TensorProto.UINT8 else np.int8
    inits = {"as": np.float32(0.03), "az": np.asarray(2, npx), "b": RNG.integers(-64, 64, (11, 3)).astype(np.int8),
             "bs": np.float32(0.02), "bz": np.int8(0), "ys": np.float32(0.1), "yz": np.asarray(1 if npx is np.uint8 else -1, npx)}
    nodes = [helper.make_node("QLinearMatMul", ["x", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", x_dtype, [4, 11])],
                   [helper.make_tensor_value_info("y", x_dtype, [4, 3])], inits)
    assert _qgemms(model) == 1
    info = np.iinfo(npx)
    x = RNG.integers(info.min, info.max + 1, (4, 11)).astype(npx)
    _same_as_float_path(model, x)
    _within_one_lsb_of_ort(model, x)


@pytest.mark.parametrize("pads,strides", [((1, 1, 1, 1), (1, 1)), ((0, 0, 0, 0), (2, 2))])
def test_qlinear_conv_within_one_lsb_of_ort(pads, strides):
    """Prime channel counts, per-channel weight scales, an int32 bias."""
    co, c = 7, 5
    inits = {"xs": np.float32(0.03), "xz": np.uint8(7), "w": RNG.integers(-64, 64, (co, c, 3, 3)).astype(np.int8),
             "ws": (RNG.random(co) * 0.02 + 0.005).astype(np.float32), "wz": np.zeros(co, np.int8),
             "ys": np.float32(0.2), "yz": np.uint8(100), "b": RNG.integers(-500, 500, co).astype(np.int32)}
    nodes = [helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"], pads=pads,
                              strides=strides)]
    out = 9 if strides == (1, 1) else 4
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, c, 9, 9])],
                   [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, co, out, out])], inits)
    assert _qgemms(model) == 1
    x = RNG.integers(0, 256, (1, c, 9, 9)).astype(np.uint8)
    _same_as_float_path(model, x)
    _within_one_lsb_of_ort(model, x)


def test_kernel_choice_follows_the_cpu_and_the_weights():
    small, large = np.full((4, 2), 64, np.int8), np.full((4, 2), 127, np.int8)
    avx2 = Target.parse("c -arch=x86_64 -features=avx,avx2,fma")
    vnni = Target.parse("c -arch=x86_64 -features=avx,avx2,fma,avx512f,avx512bw,avx512_vnni")
    assert choose_kernel(small, avx2, None, avx2=True) == "avx2"
    assert choose_kernel(large, avx2, None, avx2=True) == "avx2_split"
    assert choose_kernel(small, avx2, None) is None  # AVX2's integer path is off unless asked for
    assert choose_kernel(large, vnni, None) == "vnni"
    assert choose_kernel(small, Target.parse("c -arch=x86_64 -features=sse2"), None) is None


def test_an_exported_int8_model_loads_and_runs_the_same(tmp_path):
    model = _qdq_matmul(RNG.integers(-128, 128, (13, 7)).astype(np.int8), np.zeros(7, np.int8))
    x = {"x": RNG.integers(0, 256, (5, 13)).astype(np.uint8)}
    built = kiln.build(model, pass_config=AVX2)
    built.export(tmp_path / "m")
    np.testing.assert_array_equal(kiln.load(tmp_path / "m").run(None, x)[0], built.run(x)[0])


@pytest.mark.parametrize("kernel,message", [("avx3", "not a micro-kernel"), ("vnni", "the target lacks avx512")])
def test_a_forced_kernel_must_exist_and_run_on_the_target(kernel, message):
    model = _qdq_matmul(RNG.integers(-128, 128, (13, 7)).astype(np.int8), np.zeros(7, np.int8))
    target = Target.parse("c -arch=x86_64 -features=avx,avx2,fma")
    with pytest.raises(KilnError, match=message):
        fuse(kiln.from_onnx(model), 3, PassContext(opt_level=3, target=target, config={"int8_ops.kernel": kernel}))
