"""Cross-kernel weight prefetch (kiln.npu.prefetch): the next kernel's first weights load during the
kernel before it with identical outputs and fewer cycles, only where both programs fit beside the
region, and a kernel that reads the region before any program filled it is refused."""

import numpy as np
import pytest

from kiln.npu import onchip, prefetch
from kiln.npu.build import build_npu
from kiln.npu.config import NpuConfig
from kiln.npu.isa import Load
from kiln.npu.lower_conv import Options
from kiln.npu.simulator import NpuProgramError, Simulator
from tests.npu.test_onchip import NPU, _chain


def _built(prefetch: bool, onchip: bool = True):
    mod = _chain(32, 8)
    built = build_npu(mod, NPU, options=Options(onchip=onchip, prefetch_weights=prefetch))
    x = mod.main.params[0]
    feeds = {x.name: np.random.default_rng(4).standard_normal(x.type.shape).astype(np.float32)}
    return built, feeds


def test_the_next_kernels_first_weights_load_during_the_kernel_before_it():
    on, feeds = _built(True)
    off, _ = _built(False)
    outs, plain = on.run(feeds), off.run(feeds)
    np.testing.assert_array_equal(outs[0], plain[0])
    (k0, s0), (k1, s1) = on.runner.last_run.kernels
    (_, p0), (_, p1) = off.runner.last_run.kernels
    parts = [i for i in k0.program.instructions if isinstance(i, Load) and i.into]
    first = next(i for i in k1.program.instructions if isinstance(i, Load) and i.buf == "wgt")
    assert first.tensor == "prefetch.npu1_conv" and {p.into for p in parts} == {first.tensor}
    assert sum(p.size[2] for p in parts) == first.size[2]  # its input channels, in parts behind the steps
    assert s1.cycles < p1.cycles and s0.cycles + s1.cycles < p0.cycles + p1.cycles
    assert s0.dma_bytes + s1.dma_bytes == p0.dma_bytes + p1.dma_bytes


def test_a_prefetch_that_does_not_fit_beside_the_slots_is_not_made():
    built, _ = _built(False)
    kernels = [k for _, k in built.runner.steps]
    region = next(i for i in kernels[1].program.instructions if isinstance(i, Load) and i.buf == "wgt")
    nbytes = int(np.prod(region.size)) * 4
    needs = max(onchip.buffer_needs(k.program, NpuConfig())["wgt"] + k.program.held_bytes("wgt") for k in kernels)
    for room, made in ((needs + nbytes - 1, False), (needs + nbytes, True)):
        fetched = prefetch.prefetch(kernels, NpuConfig(wgt_bytes=room))
        assert any(isinstance(i, Load) and i.into for i in fetched[0].program.instructions) == made


def test_a_kernel_run_before_its_weights_were_prefetched_is_refused():
    built, _ = _built(True, onchip=False)
    kernel = built.runner.steps[1][1]
    dram = kernel.dram({"inp": np.zeros((1, 8, 8, 32), np.float32)})
    with pytest.raises(NpuProgramError, match="reads held tensor 'prefetch.npu1_conv' before any program stored it"):
        Simulator().run(kernel.program, dram)
