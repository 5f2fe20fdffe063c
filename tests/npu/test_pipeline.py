"""The vector unit's own queue: a convolution tile's epilogue overlaps the next tile's GEMMs with
identical results and fewer cycles, the tokens between the matrix unit, the vector unit and the load
unit order the aux slots' reuse, and the cost model follows the same pipeline."""

import dataclasses

import numpy as np
import pytest

from kiln.npu.config import NpuConfig
from kiln.npu.conv_spec import ConvSpec, EpilogueOp, Tile
from kiln.npu.cost_model import predict
from kiln.npu.isa import Alu, Load, Pop
from kiln.npu.lower_conv import Options, lower_conv
from kiln.npu.simulator import NpuProgramError, Simulator
from tests.npu.conv_reference import conv_nhwc

SPEC = ConvSpec(1, 14, 14, 64, 64, 3, 3, 1, (1, 1, 1, 1))  # compute-bound
TILE = Tile(2, 64, 64)
DEFAULT = NpuConfig()
EPILOGUE = [EpilogueOp("add", tensor="b", per_channel=True), EpilogueOp("add", tensor="r"),
            EpilogueOp("max", imm=0.0), EpilogueOp("min", imm=6.0)]


def _dram(spec: ConvSpec = SPEC, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = (1, spec.h, spec.w, spec.cout)
    return {"x": rng.standard_normal((1, spec.h, spec.w, spec.cin)).astype(np.float32),
            "w": rng.standard_normal((spec.kh, spec.kw, spec.cin, spec.cout)).astype(np.float32),
            "b": rng.standard_normal((1, 1, 1, spec.cout)).astype(np.float32),
            "r": rng.standard_normal(shape).astype(np.float32), "y": np.zeros(shape, np.float32)}


def _run(options: Options, spec: ConvSpec = SPEC, epilogue=EPILOGUE, config: NpuConfig = DEFAULT, drop=None):
    program = lower_conv("c", spec, TILE, ("x", "w", "y"), epilogue, config, options)
    if drop is not None:
        program = dataclasses.replace(program, instructions=[i for i in program.instructions if i != drop])
    dram = _dram(spec)
    return Simulator(config).run(program, dram), dram["y"]


def test_the_epilogue_overlapping_the_next_gemms_gives_identical_outputs_in_fewer_cycles():
    overlapped, y = _run(Options())
    serial, y_serial = _run(Options(overlap_epilogue=False))
    np.testing.assert_array_equal(y, y_serial)
    d = _dram()
    want = np.clip(conv_nhwc(d["x"], d["w"], SPEC) + d["b"] + d["r"], 0, 6)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    assert overlapped.cycles < serial.cycles
    assert overlapped.gemm_cycles == serial.gemm_cycles and overlapped.busy["vector"] >= 4 * 14 * 14 * 64 // 64


def test_a_program_whose_load_does_not_wait_for_the_epilogue_overwrites_its_operands():
    spec = ConvSpec(1, 14, 14, 64, 64, 1, 1, 1, (0, 0, 0, 0))
    slow = EPILOGUE + [EpilogueOp("mul", imm=1.0)] * 8  # the vector unit falls behind the matrix unit
    fast_dma = NpuConfig(dma_bytes_per_cycle=1024, dma_latency=1)  # and the loads run ahead of it
    _, y = _run(Options(), spec, slow, fast_dma)
    _, loose = _run(Options(), spec, slow, fast_dma, drop=Pop("load", "vector"))
    assert not np.array_equal(y, loose)


def test_the_epilogue_runs_on_the_vector_units_queue():
    program = lower_conv("c", SPEC, TILE, ("x", "w", "y"), EPILOGUE, NpuConfig())
    queues = program.queues()
    assert queues["vector"] and all(isinstance(i, (Alu, Pop)) or i.unit == "vector" for i in queues["vector"])
    assert not any(isinstance(i, Alu) for i in queues["compute"])


@pytest.mark.parametrize("overlap", [True, False])
def test_the_cost_model_follows_the_vector_units_pipeline(overlap):
    options = Options(overlap_epilogue=overlap)
    simulated, _ = _run(options)
    predicted = predict(SPEC, TILE, NpuConfig(), options, tuple(EPILOGUE)).cycles
    assert abs(predicted - simulated.cycles) <= 0.05 * simulated.cycles


def test_the_next_output_channel_tiles_weights_load_during_the_second_row_tile():
    spec = ConvSpec(1, 8, 8, 32, 64, 1, 1, 1, (0, 0, 0, 0))
    program = lower_conv("c", spec, Tile(2, 16, 32), ("x", "w", "y"), [], DEFAULT)
    loads = [i for i in program.instructions if isinstance(i, Load)]
    weights = [k for k, i in enumerate(loads) if i.buf == "wgt"]
    inputs = [k for k, i in enumerate(loads) if i.buf == "inp"]
    assert len(weights) == 4 and weights[1] == inputs[1] + 1  # co tile 1's, right after row tile 1's input
    assert [loads[k].slot for k in weights] == [0, 1, 0, 1]
    dram = {**_dram(spec), "y": np.zeros((1, 8, 8, 64), np.float32)}
    Simulator().run(program, dram)
    np.testing.assert_allclose(dram["y"], conv_nhwc(dram["x"], dram["w"], spec), rtol=1e-4, atol=1e-4)
    single = lower_conv("c", spec, Tile(2, 16, 32), ("x", "w", "y"), [], DEFAULT, Options(double_buffer=False))
    single_loads = [i for i in single.instructions if isinstance(i, Load)]
    assert [i.buf for i in single_loads][:2] == ["inp", "wgt"] and single_loads[2].buf == "inp"  # no slot to spare


def test_the_weights_loaded_ahead_come_in_parts_one_behind_each_later_row_tile():
    spec = ConvSpec(1, 8, 8, 64, 128, 3, 3, 1, (1, 1, 1, 1))
    program = lower_conv("c", spec, Tile(2, 64, 64), ("x", "w", "y"), [], DEFAULT)
    loads = [i for i in program.instructions if isinstance(i, Load)]
    parts = [k for k, i in enumerate(loads) if i.whole]
    inputs = [k for k, i in enumerate(loads) if i.buf == "inp"]
    assert parts == [inputs[1] + 1, inputs[2] + 1, inputs[3] + 1]  # behind row tiles 1, 2 and 3 of co tile 0
    assert {loads[k].slot for k in parts} == {1} and sum(loads[k].size[2] for k in parts) == spec.cin
    assert [loads[k].at[2] for k in parts] == [0, 22, 44]
    dram = {**_dram(spec), "y": np.zeros((1, 8, 8, 128), np.float32)}
    simulated = Simulator().run(program, dram).cycles
    np.testing.assert_allclose(dram["y"], conv_nhwc(dram["x"], dram["w"], spec), rtol=1e-4, atol=1e-4)
    predicted = predict(spec, Tile(2, 64, 64), DEFAULT).cycles
    assert abs(predicted - simulated) <= 0.05 * simulated


def test_a_later_part_of_a_weight_tile_without_its_start_is_refused():
    spec = ConvSpec(1, 8, 8, 64, 128, 3, 3, 1, (1, 1, 1, 1))
    program = lower_conv("c", spec, Tile(2, 64, 64), ("x", "w", "y"), [], DEFAULT)
    start = next(i for i in program.instructions if isinstance(i, Load) and i.whole)
    broken = dataclasses.replace(program, instructions=[i for i in program.instructions if i != start])
    dram = {**_dram(spec), "y": np.zeros((1, 8, 8, 128), np.float32)}
    with pytest.raises(NpuProgramError, match=r"needs a weight tile of that size started in slot 1"):
        Simulator().run(broken, dram)
