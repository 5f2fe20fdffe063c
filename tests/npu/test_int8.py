"""int8 models on the accelerator: QDQ convolutions, depthwise convolutions, dense layers and max pools on
random shapes (odd, prime, size 1; uint8 and int8 activations, any zero point) bit-exact against the
interpreter on the QDQ graph, a quantized CNN end to end, and the placement of a `kiln.quantize` model."""

import warnings

import numpy as np
import onnx
import pytest

import kiln
from kiln.ir import Constant, Function, IRModule, TupleGetItem, Var
from kiln.ir.types import TensorType
from kiln.models import small_cnn
from kiln.npu.int8_placement import Int8Step
from kiln.npu.isa import Gemm, Load, Pop, Program, Push, Requantize, Store
from kiln.npu.simulator import Simulator
from kiln.op import get_op
from tests.npu.int8_graphs import dequantize, int8_weights, output_scale, quantize, quantized_input

SIZES = (1, 2, 3, 5, 7, 11, 13)


def _run_exact(mod, feeds, on_npu: int):
    """Build for npu-sim, check `on_npu` int8 steps were placed and every output equals the interpreter's."""
    built = kiln.build(mod, "npu-sim")
    assert sum(isinstance(s, Int8Step) for s, _ in built.runner.steps) == on_npu
    for got, want in zip(built.run(feeds), kiln.evaluate(mod, feeds)):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    return built


def _requantized(rng, y, x_scale: float, w_scale: float, terms: int, dtype: str):
    """`y` through an optional relu / clip and a QuantizeLinear, sometimes requantized once more."""
    roll = rng.random()
    if roll < 0.4:
        y = get_op("nn.relu")(y)
    elif roll < 0.6:
        y = get_op("math.clip")(y, Constant(np.float32(-0.5)), Constant(np.float32(3.0)))
    scale = output_scale(x_scale, w_scale, terms)
    zp = int(rng.integers(0, 256) if dtype == "uint8" else rng.integers(-128, 128))
    y = quantize(y, scale, zp, dtype)
    if rng.random() < 0.5:
        y = quantize(get_op("nn.relu")(dequantize(y, scale, zp)), scale * 2, zp // 2, dtype)
    return y


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_int8_convolution_is_bit_exact_on_random_shapes(seed, dtype):
    rng = np.random.default_rng(seed)
    depthwise = seed % 3 == 2
    cin = int(rng.choice(SIZES + (17, 31)))
    cout = cin if depthwise else int(rng.choice(SIZES + (19, 37)))
    k, stride = int(rng.choice([1, 3, 5])), int(rng.integers(1, 3))
    h, w = int(rng.choice(SIZES[2:])) + k, int(rng.choice(SIZES)) + k
    x, zp, x_scale, feed = quantized_input(rng, "x", (int(rng.integers(1, 3)), cin, h, w), dtype)
    weights, w_scale = int8_weights(rng, (cout, 1 if depthwise else cin, k, k), 0)
    bias = dequantize(Constant(rng.integers(-3000, 3000, cout).astype(np.int32)), x_scale * w_scale, 0)
    pad = int(rng.integers(0, k // 2 + 1))
    y = get_op("nn.conv")(dequantize(x, x_scale, zp), weights, bias, group=cin if depthwise else 1,
                          pads=(pad, pad, pad + int(rng.integers(0, 2)), pad), strides=(stride, stride))
    y = _requantized(rng, y, x_scale, w_scale, k * k * (1 if depthwise else cin), dtype)
    built = _run_exact(IRModule({"main": Function((x,), y)}), {"x": feed}, 1)
    assert built.runner.last_run.cpu_steps == 0 and built.runner.last_run.kernels[0][1].macs > 0


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("form", ["gemm", "gemm_transB", "matmul"])
def test_int8_dense_is_bit_exact_on_random_shapes(seed, form):
    rng = np.random.default_rng(seed)
    m, k, n = (int(rng.choice(SIZES + (29, 64))) for _ in range(3))
    dtype = "uint8" if seed % 2 else "int8"
    x, zp, x_scale, feed = quantized_input(rng, "x", (m, k), dtype)
    transposed = form == "gemm_transB"
    weights, w_scale = int8_weights(rng, (n, k) if transposed else (k, n), 0 if transposed else 1)
    a = dequantize(x, x_scale, zp)
    if form == "matmul":
        y = get_op("linalg.mat_mul")(a, weights)
    else:
        bias = Constant((rng.integers(-40, 40, n) * x_scale * w_scale).astype(np.float32))
        y = get_op("linalg.gemm")(a, weights, bias, transB=int(transposed))
    y = _requantized(rng, y, x_scale, w_scale, k, dtype)
    _run_exact(IRModule({"main": Function((x,), y)}), {"x": feed}, 1)


@pytest.mark.parametrize("seed", range(4))
def test_int8_max_pool_is_bit_exact_with_padding(seed):
    rng = np.random.default_rng(seed)
    dtype = "uint8" if seed % 2 else "int8"
    shape = (1, int(rng.choice(SIZES)), int(rng.choice(SIZES[2:])) + 2, int(rng.choice(SIZES[1:])) + 2)
    x, zp, scale, feed = quantized_input(rng, "x", shape, dtype)
    pooled = get_op("nn.max_pool")(dequantize(x, scale, zp), kernel_shape=(3, 3), pads=(1, 1, 1, 1), strides=(2, 2))
    mod = IRModule({"main": Function((x,), quantize(TupleGetItem(pooled, 0), scale, zp, dtype))})
    built = _run_exact(mod, {"x": feed}, 1)
    assert built.runner.steps[0][1].kind == "pool"


def _quantized_cnn(rng):
    """conv -> Q -> DQ -> relu -> Q (a quantizer's pairs), a depthwise conv with a residual add behind it,
    max pool, a global average pool left to the float path, a dense head; the output dequantized."""
    x, zp, x_scale, feed = quantized_input(rng, "image", (1, 3, 15, 15), "uint8")
    y, scale = dequantize(x, x_scale, zp), x_scale
    for cin, cout, group in ((3, 8, 1), (8, 8, 8), (8, 12, 1)):
        weights, w_scale = int8_weights(rng, (cout, cin // group, 3, 3), 0)
        y = get_op("nn.conv")(y, weights, group=group, pads=(1, 1, 1, 1))
        scale_conv = output_scale(scale, w_scale, 9 * cin // group)
        y = quantize(y, scale_conv, 100, "uint8")
        y, scale = quantize(get_op("nn.relu")(dequantize(y, scale_conv, 100)), scale_conv, 0, "uint8"), scale_conv
        if cout == 8 and group == 1:
            skip = y
            y = dequantize(y, scale, 0)
        elif group > 1:
            y = dequantize(quantize(get_op("math.add")(dequantize(y, scale, 0), dequantize(skip, scale, 0)), scale * 2,
                                    0, "uint8"), scale * 2, 0)
            scale *= 2
            pooled = get_op("nn.max_pool")(y, kernel_shape=(2, 2), strides=(2, 2))
            y = dequantize(quantize(TupleGetItem(pooled, 0), scale, 0, "uint8"), scale, 0)
        else:
            y = dequantize(y, scale, 0)
    y = get_op("tensor.flatten")(get_op("nn.global_average_pool")(y), axis=1)
    y = dequantize(quantize(y, scale, 0, "uint8"), scale, 0)
    weights, w_scale = int8_weights(rng, (10, 12), 0)
    y = get_op("linalg.gemm")(y, weights, transB=1)
    out_scale = output_scale(scale, w_scale, 12)
    y = dequantize(quantize(y, out_scale, 128, "uint8"), out_scale, 128)
    return IRModule({"main": Function((x,), y)}), {"image": feed}


def test_a_quantized_cnn_is_bit_exact_end_to_end():
    mod, feeds = _quantized_cnn(np.random.default_rng(0))
    built = _run_exact(mod, feeds, 5)  # three convolutions (the residual add behind one), the max pool, the dense layer
    cpu_ops = {s.anchor.op.name for s, k in built.runner.steps if k is None}
    assert "math.add" not in cpu_ops and "nn.relu" not in cpu_ops
    cost = built.runner.last_run
    assert cost.cpu_regions > 0 and built.runner.cpu.on_host == []


def test_a_model_from_kiln_quantize_places_its_qdq_groups_on_the_accelerator():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # random calibration feeds
        quantized = kiln.quantize(small_cnn(batch=1, size=16), calibrate=2).model
    mod = kiln.from_onnx(quantized)
    built = kiln.build(mod, "npu-sim")
    kinds = sorted(k.kind for s, k in built.runner.steps if isinstance(s, Int8Step))
    assert kinds == ["conv", "conv", "conv", "conv", "dense", "pool"]
    feeds = {"image": np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)}
    np.testing.assert_allclose(built.run(feeds)[0], kiln.evaluate(mod, feeds)[0], atol=2e-2)
    assert all(k.program.dtype == np.int8 for s, k in built.runner.steps if isinstance(s, Int8Step))


def test_a_model_from_onnx_runtimes_quantize_static_runs_in_int8_like_the_interpreter_and_ort(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    from tests.models.quantized import feeds, static_qdq

    model = onnx.load(static_qdq(small_cnn(batch=1, size=16), tmp_path, "cnn"))
    mod = kiln.from_onnx(model)
    built = kiln.build(mod, "npu-sim")
    assert sum(isinstance(s, Int8Step) for s, _ in built.runner.steps) == 6  # four convolutions, pool, dense
    x = feeds(model, 7)
    got = built.run(x)[0]
    np.testing.assert_allclose(got, kiln.evaluate(mod, x)[0], atol=2e-2)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)[0]
    np.testing.assert_allclose(got, want, atol=2e-2)


@pytest.mark.parametrize("scale", [0.5, 0.37])
def test_the_vector_units_requantize_is_onnx_quantize_linear(scale):
    """Any float32 tile (ties to even, values that saturate) gives QuantizeLinear's uint8 values, shifted."""
    m, k, zp = 9, 16, 131
    x = (np.random.default_rng(0).standard_normal((m, k)) * 90).astype(np.float32)
    x[0, :6] = [0.25, 0.75, -1.25, 1000.0, -1000.0, 1.75]  # halves of 0.5: ties
    program = Program("requantize", [
        Load("inp", 0, "x", (0, 0, 0, 0), (1, 1, m, k)), Load("wgt", 0, "w", (0, 0, 0, 0), (1, 1, k, k)),
        Push("load", "compute"), Pop("compute", "load"), Gemm(0, 0, 0, 0, 0, 1, 1, m, True),
        Push("compute", "vector"), Pop("vector", "compute"), Requantize(0, scale, zp - 128),
        Push("vector", "store"), Pop("store", "vector"),
        Store(0, "y", (0, 0, 0, 0), (1, 1, m, k))], {})
    dram = {"x": x.reshape(1, 1, m, k), "w": np.eye(k, dtype=np.float32).reshape(1, 1, k, k),
            "y": np.zeros((1, 1, m, k), np.int8)}
    Simulator().run(program, dram)
    v = Var("v", TensorType((m, k), "float32"))
    want = kiln.evaluate(IRModule({"main": Function((v,), quantize(v, scale, zp, "uint8"))}), {"v": x})[0]
    np.testing.assert_array_equal(dram["y"].reshape(m, k).view(np.uint8) ^ np.uint8(0x80), want)
