"""Graph scheduling for on-chip memory (kiln.npu.onchip): an intermediate that fits stays on chip (its DMA
bytes become on-chip moves), one that does not goes through DRAM, the outputs are bit-identical to the
unfused lowering's, the tokens still order each program's slot reuse, and a kernel with a held tensor
is tiled again for it (only where the new tile fits beside the held tensors)."""

import dataclasses

import numpy as np
import pytest

import kiln
from kiln.ir import Constant, Function, IRModule, Var
from kiln.ir.types import TensorType
from kiln.models import mobilenet_v2
from kiln.npu import onchip
from kiln.npu.build import build_npu
from kiln.npu.config import NpuConfig
from kiln.npu.conv_spec import ConvSpec, Tile
from kiln.npu.isa import Held, Load, Pop
from kiln.npu.lower_conv import Options, lower_conv
from kiln.npu.simulator import NpuProgramError
from kiln.op import get_op
from kiln.target import Target

NPU = Target.parse("npu-sim")


def _conv(x, cout, rng, k=3):
    w = Constant(rng.standard_normal((cout, x.type.shape[1], k, k)).astype(np.float32) * 0.2)
    return get_op("nn.conv")(x, w, pads=(k // 2,) * 4)


def _chain(channels: int, size: int) -> IRModule:
    """conv -> relu -> conv: one intermediate of channels x size x size floats between two kernels."""
    rng = np.random.default_rng(0)
    x = Var("x", TensorType((1, channels, size, size), "float32"))
    y = _conv(get_op("nn.relu")(_conv(x, channels, rng)), channels, rng)
    return IRModule({"main": Function((x,), y)})


def _residual() -> IRModule:
    """a -> conv -> conv (+ a): `a` is read by the next kernel and by the add of the one after it."""
    rng = np.random.default_rng(1)
    x = Var("x", TensorType((1, 16, 8, 8), "float32"))
    a = get_op("nn.relu")(_conv(x, 16, rng))
    y = get_op("nn.relu")(get_op("math.add")(_conv(get_op("nn.relu")(_conv(a, 16, rng)), 16, rng), a))
    return IRModule({"main": Function((x,), y)})


def _run(mod, onchip=True, config=None, feeds=None, tiling="cost-model", prefetch=False):
    """Built and run; weight prefetch (kiln.npu.prefetch, tests/npu/test_prefetch.py) off unless asked."""
    built = build_npu(mod, NPU, config=config, options=Options(onchip=onchip, prefetch_weights=prefetch),
                      tiling=tiling)
    x = mod.main.params[0]
    feeds = feeds or {x.name: np.random.default_rng(2).standard_normal(x.type.shape).astype(np.float32)}
    return built, built.run(feeds), feeds


def test_an_intermediate_that_fits_stays_on_chip_and_its_store_and_loads_leave_dma():
    mod = _chain(16, 8)  # the simple tiling: the same tiles either way (the cost model re-tiles held kernels)
    held, outs, feeds = _run(mod, tiling="simple")
    unfused, plain, _ = _run(mod, onchip=False, feeds=feeds, tiling="simple")
    size = 16 * 8 * 8 * 4
    on, off = held.runner.last_run.total(), unfused.runner.last_run.total()
    assert off.stored_bytes - on.stored_bytes == size  # the producer's store of it ...
    assert off.dma_bytes - on.dma_bytes == on.onchip_bytes >= 2 * size  # ... and the reader's loads (halos too)
    assert off.onchip_bytes == 0
    assert on.cycles < off.cycles
    first, second = (k for k, _ in held.runner.last_run.kernels)
    assert first.held_output == "held.npu0_conv" and "inp" not in second.operands
    np.testing.assert_array_equal(outs[0], plain[0])
    np.testing.assert_allclose(outs[0], kiln.evaluate(mod, feeds)[0], rtol=1e-4, atol=1e-5)


def test_an_intermediate_that_does_not_fit_beside_the_tiles_goes_through_dram():
    mod = _chain(32, 16)  # a 32 KB intermediate
    config = NpuConfig(inp_bytes=24 << 10, wgt_bytes=24 << 10, acc_bytes=24 << 10, aux_bytes=24 << 10)
    held, outs, feeds = _run(mod, config=config)
    _, plain, _ = _run(mod, onchip=False, config=config, feeds=feeds)
    cost = held.runner.last_run
    assert all(k.held_output is None and not k.program.held for k, _ in cost.kernels)
    assert cost.total().onchip_bytes == 0
    np.testing.assert_array_equal(outs[0], plain[0])


def test_a_residuals_source_stays_on_chip_until_the_add_that_reads_it():
    mod = _residual()
    held, outs, feeds = _run(mod)
    _, plain, _ = _run(mod, onchip=False, feeds=feeds)
    kernels = [k for k, _ in held.runner.last_run.kernels]
    assert [k.held_output for k in kernels] == ["held.npu0_conv", "held.npu1_conv", None]
    assert [h.tensor for h in kernels[2].program.held] == ["held.npu0_conv", "held.npu1_conv"]
    assert not kernels[2].operands  # its input and its residual both come from chip
    np.testing.assert_array_equal(outs[0], plain[0])
    np.testing.assert_allclose(outs[0], kiln.evaluate(mod, feeds)[0], rtol=1e-4, atol=1e-5)


def test_mobilenet_v2s_inverted_residual_blocks_are_bit_identical_to_the_unfused_lowering():
    mod = kiln.from_onnx(mobilenet_v2(batch=1, size=32))
    held, outs, feeds = _run(mod, prefetch=True)
    _, plain, _ = _run(mod, onchip=False, feeds=feeds, prefetch=True)
    kinds = {k.kind for k, _ in held.runner.last_run.kernels if k.held_output}
    assert {"conv", "depthwise"} <= kinds
    np.testing.assert_array_equal(outs[0], plain[0])


def test_tokens_still_order_slot_reuse_for_a_kernel_reading_a_held_tensor():
    mod = _chain(32, 16)
    config = NpuConfig(inp_bytes=48 << 10)  # the reader's input comes in several tiles through two slots
    held, outs, feeds = _run(mod, config=config, tiling="simple")  # each a different row tile
    (step0, k0), (step1, k1) = held.runner.steps
    assert k0.held_output and sum(isinstance(i, Load) and i.buf == "inp" for i in k1.program.instructions) > 2
    loose = dataclasses.replace(k1.program, instructions=[i for i in k1.program.instructions
                                                          if i != Pop("load", "compute")])
    held.runner.steps[1] = (step1, dataclasses.replace(k1, program=loose))
    assert not np.array_equal(held.run(feeds)[0], outs[0])


def test_a_held_tensor_read_before_it_is_stored_is_refused():
    mod = _chain(16, 8)
    held, _, feeds = _run(mod)
    held.runner.steps.reverse()
    with pytest.raises(NpuProgramError, match="reads held tensor 'held.npu0_conv' before any program stored it"):
        held.run(feeds)


def _expand() -> IRModule:
    """conv -> relu -> 1x1 conv to 6x the channels (mobilenet_v2's expansion at 14x14)."""
    rng = np.random.default_rng(3)
    x = Var("x", TensorType((1, 64, 14, 14), "float32"))
    return IRModule({"main": Function((x,), get_op("nn.relu")(_conv(get_op("nn.relu")(_conv(x, 64, rng)), 384,
                                                                        rng, k=1)))})


def test_a_kernel_reading_a_held_input_is_tiled_for_it_with_identical_outputs():
    mod = _expand()
    held, outs, feeds = _run(mod)
    unfused, plain, _ = _run(mod, onchip=False, feeds=feeds)
    (k, on), (k_dram, off) = held.runner.last_run.kernels[1], unfused.runner.last_run.kernels[1]
    assert "inp" not in k.operands and k.tile.cout < k_dram.tile.cout
    assert k.tile.cin == k_dram.tile.cin
    assert on.cycles < off.cycles and on.dma_bytes < off.dma_bytes
    np.testing.assert_array_equal(outs[0], plain[0])


def test_a_program_that_does_not_fit_beside_the_held_tensors_is_refused():
    plan = onchip.Plan({0: [Held("h", "wgt", (1, 1, 1, 1000), "float32")]}, [])
    program = lower_conv("c", ConvSpec(1, 4, 4, 16, 16, 1, 1, 1, (0, 0, 0, 0)), Tile(4, 16, 16),
                         ("x", "w", "y"), [], NpuConfig())
    assert onchip.fits_beside(program, 0, plan, NpuConfig())
    assert not onchip.fits_beside(program, 0, plan, NpuConfig(wgt_bytes=4096))
