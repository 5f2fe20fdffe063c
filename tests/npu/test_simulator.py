"""The simulator: bit-exact int8 convolutions and dense layers on random shapes, float results, the
cycle model's stalls, double buffering, bank conflicts, and the errors of malformed programs."""

import numpy as np
import pytest

from kiln.npu.config import NpuConfig
from kiln.npu.conv_spec import ConvSpec, EpilogueOp, Tile
from kiln.npu.isa import Gemm, Load, Pop, Program, Push, Store
from kiln.npu.lower_conv import Options, lower_conv
from kiln.npu.simulator import NpuProgramError, Simulator
from tests.npu.conv_reference import conv_nhwc, requantize

OFF = Options(double_buffer=False, conflict_free=False)


def _random_int8_case(seed: int) -> tuple[ConvSpec, Tile]:
    rng = np.random.default_rng(seed)
    k = int(rng.choice([1, 3, 5]))
    stride = int(rng.integers(1, 3))
    pad = int(rng.integers(0, k // 2 + 1))
    spec = ConvSpec(int(rng.integers(1, 3)), int(rng.integers(k, 14)), int(rng.integers(k, 14)),
                    int(rng.integers(1, 50)), int(rng.integers(1, 40)), k, k, stride, (pad, pad, pad, pad), "int8")
    tile = Tile(int(rng.integers(1, spec.out_h + 1)), int(rng.choice([16, 32, spec.cout])),
                int(rng.choice([16, 32, spec.cin])))
    return spec, tile


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("options", [Options(), OFF], ids=["optimized", "plain"])
def test_int8_convolution_is_bit_exact_on_random_shapes(seed, options):
    spec, tile = _random_int8_case(seed)
    rng = np.random.default_rng(100 + seed)
    x = rng.integers(-128, 128, (spec.n, spec.h, spec.w, spec.cin), dtype=np.int8)
    w = rng.integers(-128, 128, (spec.kh, spec.kw, spec.cin, spec.cout), dtype=np.int8)
    bias = rng.integers(-5000, 5000, (1, 1, 1, spec.cout), dtype=np.int32)
    dram = {"x": x, "w": w, "b": bias, "y": np.zeros((spec.n, spec.out_h, spec.out_w, spec.cout), np.int8)}
    epilogue = [EpilogueOp("add", tensor="b", per_channel=True), EpilogueOp("shr", imm=9), EpilogueOp("max", imm=0)]
    program = lower_conv("conv", spec, tile, ("x", "w", "y"), epilogue, NpuConfig(), options)
    Simulator().run(program, dram)
    expected = np.maximum(requantize(conv_nhwc(x, w, spec) + bias, 9), 0)
    np.testing.assert_array_equal(dram["y"], expected)


def test_int8_dense_is_bit_exact_with_a_residual():
    rng = np.random.default_rng(1)
    m, k, n = 5, 70, 33
    spec = ConvSpec(1, 1, m, k, n, 1, 1, 1, (0, 0, 0, 0), "int8")
    a = rng.integers(-128, 128, (1, 1, m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (1, 1, k, n), dtype=np.int8)
    r = rng.integers(-100000, 100000, (1, 1, m, n), dtype=np.int32)
    dram = {"a": a, "b": b, "r": r, "y": np.zeros((1, 1, m, n), np.int8)}
    program = lower_conv("dense", spec, Tile(1, 16, 32), ("a", "b", "y"), [EpilogueOp("add", tensor="r"),
                                                                           EpilogueOp("shr", imm=10)], NpuConfig())
    Simulator().run(program, dram)
    expected = requantize(a[0, 0].astype(np.int64) @ b[0, 0].astype(np.int64) + r[0, 0], 10)
    np.testing.assert_array_equal(dram["y"][0, 0], expected)


def test_float_and_depthwise_convolutions_match_numpy():
    rng = np.random.default_rng(2)
    for spec in (ConvSpec(1, 9, 7, 20, 24, 3, 3, 2, (1, 1, 1, 1)),
                 ConvSpec(2, 8, 8, 40, 40, 3, 3, 1, (1, 1, 1, 1), depthwise=True)):
        x = rng.standard_normal((spec.n, spec.h, spec.w, spec.cin)).astype(np.float32)
        w = rng.standard_normal((spec.kh, spec.kw, spec.weight_cin, spec.cout)).astype(np.float32)
        dram = {"x": x, "w": w, "y": np.zeros((spec.n, spec.out_h, spec.out_w, spec.cout), np.float32)}
        tile = Tile(3, 16, 16 if spec.depthwise else 8)
        Simulator().run(lower_conv("c", spec, tile, ("x", "w", "y"), [], NpuConfig()), dram)
        np.testing.assert_allclose(dram["y"], conv_nhwc(x, w, spec), rtol=1e-5, atol=1e-4)


def _layer() -> tuple[ConvSpec, dict[str, np.ndarray]]:
    spec = ConvSpec(1, 16, 16, 64, 64, 3, 3, 1, (1, 1, 1, 1))
    dram = {"x": np.zeros((1, 16, 16, 64), np.float32), "w": np.zeros((3, 3, 64, 64), np.float32),
            "y": np.zeros((1, 16, 16, 64), np.float32)}
    return spec, dram


def test_double_buffering_overlaps_loads_with_compute():
    spec, dram = _layer()
    config = NpuConfig()
    single = Simulator(config).run(lower_conv("c", spec, Tile(2, 64, 64), ("x", "w", "y"), [], config,
                                              Options(double_buffer=False)), dram, functional=False)
    double = Simulator(config).run(lower_conv("c", spec, Tile(2, 64, 64), ("x", "w", "y"), [], config),
                                   dram, functional=False)
    assert (double.gemm_cycles, double.dma_bytes) == (single.gemm_cycles, single.dma_bytes)  # the same work ...
    assert double.cycles < single.cycles  # ... overlapped
    assert single.cycles >= single.busy["load"] + single.busy["compute"] - 2 * 64  # serialized but for tokens
    assert double.cycles >= max(double.busy.values())


def test_the_conflict_free_layout_removes_the_matrix_units_bank_conflicts():
    spec = ConvSpec(1, 15, 15, 64, 32, 3, 3, 2, (1, 1, 1, 1))
    dram = {"x": np.zeros((1, 15, 15, 64), np.float32), "w": np.zeros((3, 3, 64, 32), np.float32),
            "y": np.zeros((1, 8, 8, 32), np.float32)}
    config = NpuConfig()
    dense = Simulator(config).run(lower_conv("c", spec, Tile(8, 32, 64), ("x", "w", "y"), [], config,
                                             Options(conflict_free=False)), dram, functional=False)
    free = Simulator(config).run(lower_conv("c", spec, Tile(8, 32, 64), ("x", "w", "y"), [], config), dram,
                                 functional=False)
    assert dense.conflicts > 0 and free.conflicts == 0
    assert free.gemm_cycles == dense.gemm_cycles - dense.conflicts


def test_tokens_order_the_units_and_a_missing_token_is_a_deadlock():
    x = np.ones((1, 1, 4, 16), np.float32)
    w = np.ones((1, 1, 16, 16), np.float32)
    body = [Load("inp", 0, "x", (0, 0, 0, 0), (1, 1, 4, 16)), Load("wgt", 0, "w", (0, 0, 0, 0), (1, 1, 16, 16)),
            Push("load", "compute"), Pop("compute", "load"), Gemm(0, 0, 0, 0, 0, 1, 1, 4, True),
            Push("compute", "store"), Pop("store", "compute"), Store(0, "y", (0, 0, 0, 0), (1, 1, 4, 16))]
    dram = {"x": x, "w": w, "y": np.zeros((1, 1, 4, 16), np.float32)}
    stats = Simulator().run(Program("ok", body, {}), dram)
    np.testing.assert_array_equal(dram["y"], np.full((1, 1, 4, 16), 16.0))
    assert stats.stalls["compute"] > 0 and stats.stalls["store"] > 0
    with pytest.raises(NpuProgramError, match="deadlock"):
        Simulator().run(Program("stuck", [Pop("compute", "load"), *body], {}), dram)


def test_a_tile_larger_than_its_slot_is_refused():
    config = NpuConfig(inp_bytes=1024)
    dram = {"x": np.zeros((1, 8, 8, 16), np.float32)}
    with pytest.raises(NpuProgramError, match="needs 4096 bytes of buffer 'inp'"):
        Simulator(config).run(Program("big", [Load("inp", 0, "x", (0, 0, 0, 0), (1, 8, 8, 16))], {"inp": 1}), dram)
