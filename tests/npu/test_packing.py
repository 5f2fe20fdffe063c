"""Kernel columns packed into channels (kiln.npu.packing): packed convolutions compute the original
layer (bit-exact in int8), the cost model predicts their bytes as the simulator counts them (and their
cycles within 1%: the token timing it leaves out, as for any layer), and
resnet18's first layer uses more of the matrix unit packed."""

import numpy as np
import pytest

import kiln
from kiln.ir import Constant, Function, IRModule, Var
from kiln.ir.types import TensorType
from kiln.npu.build import build_npu
from kiln.npu.config import NpuConfig
from kiln.npu.conv_spec import ConvSpec, Tile
from kiln.npu.cost_model import predict
from kiln.npu.lower_conv import Options, lower_conv
from kiln.npu.packing import packed, packed_weights
from kiln.npu.simulator import Simulator
from kiln.npu.tiling import candidates
from kiln.op import get_op
from kiln.target import Target
from tests.npu.conv_reference import conv_nhwc

CONFIG = NpuConfig()


def _random_small_channel_spec(seed: int, dtype: str) -> ConvSpec:
    rng = np.random.default_rng(seed)
    k = int(rng.choice([3, 5, 7]))
    pad = int(rng.integers(0, k // 2 + 1))
    return ConvSpec(int(rng.integers(1, 3)), int(rng.integers(k, 20)), int(rng.integers(k, 20)),
                    int(rng.integers(1, 5)), int(rng.integers(1, 40)), k, k, int(rng.integers(1, 3)),
                    (pad, pad, pad, pad), dtype)


def _run_packed(spec: ConvSpec, x: np.ndarray, w: np.ndarray, tile_rows: int) -> np.ndarray:
    p = packed(spec, CONFIG)
    assert p is not None and (p.out_h, p.out_w) == (spec.out_h, spec.out_w)
    dram = {"x": x, "w": packed_weights(w, p.pack), "y": np.zeros((spec.n, spec.out_h, spec.out_w, spec.cout), spec.dtype)}
    Simulator(CONFIG).run(lower_conv("c", p, Tile(tile_rows, 16, p.cin), ("x", "w", "y"), [], CONFIG), dram)
    return dram["y"]


@pytest.mark.parametrize("seed", range(6))
def test_a_packed_int8_convolution_is_bit_exact(seed):
    spec = _random_small_channel_spec(seed, "int8")
    rng = np.random.default_rng(50 + seed)
    x = rng.integers(-8, 8, (spec.n, spec.h, spec.w, spec.cin), dtype=np.int8)
    w = rng.integers(-8, 8, (spec.kh, spec.kw, spec.cin, spec.cout), dtype=np.int8)
    got = _run_packed(spec, x, w, int(rng.integers(1, spec.out_h + 1)))
    np.testing.assert_array_equal(got, np.clip(conv_nhwc(x, w, spec), -128, 127))


def test_a_packed_float_convolution_matches_numpy():
    spec = ConvSpec(1, 23, 21, 3, 24, 7, 7, 2, (3, 3, 3, 3))
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 23, 21, 3)).astype(np.float32)
    w = rng.standard_normal((7, 7, 3, 24)).astype(np.float32)
    np.testing.assert_allclose(_run_packed(spec, x, w, 5), conv_nhwc(x, w, spec), rtol=1e-5, atol=1e-4)


def test_layers_with_many_channels_or_one_column_are_not_packed():
    assert packed(ConvSpec(1, 8, 8, 64, 64, 3, 3, 1, (1, 1, 1, 1)), CONFIG) is None
    assert packed(ConvSpec(1, 8, 8, 3, 64, 1, 1, 1, (0, 0, 0, 0)), CONFIG) is None
    assert packed(ConvSpec(1, 8, 8, 8, 8, 3, 3, 1, (1, 1, 1, 1), depthwise=True), CONFIG) is None


@pytest.mark.parametrize("spec", [ConvSpec(1, 32, 32, 3, 64, 7, 7, 2, (3, 3, 3, 3)),
                                  ConvSpec(1, 20, 20, 3, 32, 3, 3, 2, (1, 1, 1, 1))], ids=["7x7s2", "3x3s2"])
def test_the_cost_model_predicts_a_packed_layer_as_the_simulator_times_it(spec):
    p = packed(spec, CONFIG)
    for tile in candidates(p, CONFIG)[::3]:
        dram = {"x": np.zeros((1, spec.h, spec.w, spec.cin), np.float32),
                "w": np.zeros((p.kh, p.kw, p.cin, p.cout), np.float32),
                "y": np.zeros((1, p.out_h, p.out_w, p.cout), np.float32)}
        stats = Simulator(CONFIG).run(lower_conv("c", p, tile, ("x", "w", "y"), [], CONFIG), dram, functional=False)
        cost = predict(p, tile, CONFIG)
        assert cost.dma_bytes == stats.dma_bytes and abs(cost.cycles - stats.cycles) <= 0.01 * stats.cycles


def _first_layer() -> IRModule:
    """resnet18's stem at 64x64: 3 channels, 7x7 stride 2."""
    x = Var("x", TensorType((1, 3, 64, 64), "float32"))
    w = Constant(np.random.default_rng(4).standard_normal((64, 3, 7, 7)).astype(np.float32))
    y = get_op("nn.relu")(get_op("nn.conv")(x, w, pads=(3, 3, 3, 3), strides=(2, 2)))
    return IRModule({"main": Function((x,), y)})


def test_resnet18s_first_layer_packed_takes_fewer_matrix_cycles_with_the_same_result():
    mod = _first_layer()
    feeds = {"x": np.random.default_rng(5).standard_normal((1, 3, 64, 64)).astype(np.float32)}
    runs = {}
    for pack in (True, False):
        built = build_npu(mod, Target.parse("npu-sim"), options=Options(pack_columns=pack))
        out = built.run(feeds)[0]
        np.testing.assert_allclose(out, kiln.evaluate(mod, feeds)[0], rtol=1e-4, atol=1e-4)
        (kernel, stats), = built.runner.last_run.kernels
        runs[pack] = (kernel.spec.pack, stats)
    (packed_by, on), (unpacked_by, off) = runs[True], runs[False]
    assert (packed_by, unpacked_by) == (4, 1)  # 2 groups of 4 columns: one word per pixel
    assert on.gemm_cycles * 3 < off.gemm_cycles and on.cycles < off.cycles


def test_a_layer_whose_packed_rows_fit_no_tile_stays_unpacked():
    """9 channels packed by 3 take two words a pixel where the layer takes one: at 8 KB of input buffer
    only the unpacked rows fit."""
    x = Var("x", TensorType((1, 9, 16, 16), "float32"))
    w = Constant(np.random.default_rng(6).standard_normal((16, 9, 3, 3)).astype(np.float32))
    mod = IRModule({"main": Function((x,), get_op("nn.conv")(x, w, pads=(1, 1, 1, 1)))})
    config = NpuConfig(inp_bytes=8 << 10)
    assert packed(ConvSpec(1, 16, 16, 9, 16, 3, 3, 1, (1, 1, 1, 1)), config).pack == 3
    built = build_npu(mod, Target.parse("npu-sim"), config=config)
    feeds = {"x": np.random.default_rng(7).standard_normal((1, 9, 16, 16)).astype(np.float32)}
    np.testing.assert_allclose(built.run(feeds)[0], kiln.evaluate(mod, feeds)[0], rtol=1e-4, atol=1e-4)
    (kernel, _), = built.runner.last_run.kernels
    assert kernel.spec.pack == 1
