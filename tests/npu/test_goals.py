"""Issue 32's goals on one compute-bound layer (scripts/npu_report.py measures them on the benchmark
CNNs): the matrix unit within 80% of its roofline, double buffering hiding 90% of the DMA time, and no
bank conflicts with the chosen layout."""

import numpy as np

import kiln
from kiln.ir import Constant, Function, IRModule, Var
from kiln.ir.types import TensorType
from kiln.npu import effects
from kiln.npu.report import kernel_line
from kiln.op import get_op


def _layer() -> IRModule:
    rng = np.random.default_rng(0)
    x = Var("x", TensorType((1, 64, 28, 28), "float32"))
    w = Constant(rng.standard_normal((64, 64, 3, 3)).astype(np.float32))
    y = get_op("nn.relu")(get_op("nn.conv")(x, w, pads=(1, 1, 1, 1)))
    return IRModule({"main": Function((x,), y)})


def test_a_compute_bound_conv_meets_the_goals():
    built = kiln.build(_layer(), "npu-sim")
    built.run({"x": np.ones((1, 64, 28, 28), np.float32)})
    (kernel, stats), = built.runner.last_run.kernels
    line = kernel_line(kernel, stats, built.runner.config)
    assert line.bound == "compute" and line.of_roofline >= 0.8
    variants = {e.variant: e for e in effects.measure(built.runner.mod.main, [s for s, _ in built.runner.steps],
                                                                built.runner.config)}
    assert variants["all optimizations"].dma_hidden >= 0.9 > variants["no double buffering"].dma_hidden
    # without the layout the cost model may pick a tile whose dense layout has no conflicts either; the
    # layout's effect on one tile is tests/npu/test_simulator.py's
    assert variants["all optimizations"].conflicts == 0
    assert variants["simple tiling"].cycles > variants["all optimizations"].cycles
