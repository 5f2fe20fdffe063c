"""Issue 32's goal numbers on the simulated accelerator (target npu-sim) for resnet18 and mobilenet_v2:

- end to end: the largest difference from the reference interpreter, the simulator's instructions/s;
- the matrix unit's utilization against the roofline on compute-bound conv layers (goal >= 80%);
- the share of DMA time double buffering hides where compute dominates (goal >= 90%), and without it;
- bank conflicts of the matrix unit's reads with the conflict-free layout (goal 0) and without it;
- DMA bytes and cycles with and without on-chip scheduling (intermediates held on chip between kernels);
- the share of layers where the cost model's tile is within 5% of the simulator's best (goal >= 90%).

    PYTHONPATH=. python scripts/npu_report.py [--size 224] [--models resnet18,mobilenet_v2] [--skip-tiles]

The tile check simulates every candidate tile of every distinct layer (minutes at 224); --skip-tiles
leaves it out.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import kiln
from kiln.models import mobilenet_v2, resnet18
from kiln.npu import effects
from kiln.npu.lower_conv import Options
from kiln.npu.lower_step import lower_steps
from kiln.npu.report import MATRIX_KINDS, format_lines, kernel_line
from kiln.npu.tile_search import check_tiles

MODELS = {"resnet18": resnet18, "mobilenet_v2": mobilenet_v2}


def report(name: str, size: int, tiles: bool) -> None:
    mod = kiln.from_onnx(MODELS[name](batch=1, size=size))
    feeds = {p.name: np.random.default_rng(0).standard_normal(p.type.shape).astype(np.float32)
             for p in mod.main.params}
    built = kiln.build(mod, "npu-sim")
    runner, config = built.runner, built.runner.config
    t0 = time.perf_counter()
    outs = built.run(feeds)
    wall = time.perf_counter() - t0
    diff = float(np.max(np.abs(outs[0] - kiln.evaluate(mod, feeds)[0])))
    cost = runner.last_run
    lines = [kernel_line(k, s, config) for k, s in cost.kernels]
    print(f"== {name} at {size}x{size}: max |diff| vs interpreter {diff:.3g}; {cost.total().instructions} "
          f"instructions in {wall:.2f} s ({cost.total().instructions / wall:.0f}/s); {cost.cpu_steps} CPU step(s), "
          f"{cost.transfers} transfers ({cost.transfer_bytes} bytes)")
    print("\n".join(format_lines(lines, config)))
    bound = [k for k in lines if k.kind == "conv" and k.bound == "compute"]
    roof = [k.of_roofline for k in bound]
    print(f"compute-bound conv layers: {len(bound)}; of roofline: min {min(roof, default=0):.1%}, "
          f"mean {np.mean(roof) if roof else 0:.1%} (goal >= 80%)")
    by_variant = {e.variant: e for e in effects.measure(runner.mod.main, [s for s, _ in runner.steps], config)}
    print("\n".join(effects.format_effects(list(by_variant.values()))))
    print(f"DMA hidden where compute dominates: {by_variant['all optimizations'].dma_hidden:.1%} with double "
          f"buffering (goal >= 90%), {by_variant['no double buffering'].dma_hidden:.1%} without")
    print(f"matrix-unit bank conflicts: {by_variant['all optimizations'].conflicts} with the conflict-free layout "
          f"(goal 0), {by_variant['no conflict-free layout'].conflicts} without")
    on, off = by_variant["all optimizations"], by_variant["no on-chip scheduling"]
    print(f"on-chip scheduling: {sum(k.held_output is not None for k, _ in cost.kernels)} of {len(cost.kernels)} "
          f"kernel outputs held on chip; DMA bytes {off.dma_bytes} -> {on.dma_bytes} "
          f"({1 - on.dma_bytes / off.dma_bytes:.1%} less), cycles {off.cycles} -> {on.cycles} "
          f"({1 - on.cycles / off.cycles:.1%} less)")
    if tiles:  # each layer on its own (its tensors in DRAM), as the cost model tiles it
        steps = [s for s, _ in runner.steps]
        _tile_report([k for k in lower_steps(runner.mod.main, steps, config, Options(onchip=False))
                      if k is not None and (k.kind in MATRIX_KINDS or k.kind == "depthwise")], config)


def _tile_report(kernels: list, config) -> None:
    seen: dict[tuple, float] = {}
    for k in kernels:
        key = (k.spec, k.epilogue)
        if key not in seen:
            seen[key] = check_tiles(k, config).pick_ratio
            print(f"  {k.name:28s} cost-model pick / simulated best = {seen[key]:.3f}")
    good = sum(r <= 1.05 for r in seen.values())
    print(f"cost model within 5% of the simulator's best: {good}/{len(seen)} distinct layers "
          f"({good / len(seen):.0%}; goal >= 90%)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--skip-tiles", action="store_true")
    args = parser.parse_args()
    for name in args.models.split(","):
        report(name, args.size, not args.skip_tiles)


if __name__ == "__main__":
    main()
