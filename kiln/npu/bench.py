"""`kiln bench MODEL --target npu-sim`: the model built for the simulated accelerator and run `runs`
times on random inputs; prints the simulator's speed, the kernels' report, the effect of each
optimization and the largest difference from the reference interpreter."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from kiln.errors import InputError, KilnError
from kiln.target import Target


def npu_bench(model: Any, target: str, dims: dict[str, int], runs: int, opt_level: int = 2, seed: int = 0,
              say: Callable[[str], None] = print) -> list[str]:
    """Build, run and report (see the module doc); returns the report's lines."""
    import kiln
    from kiln.feeds import random_feeds, with_fixed_dims
    from kiln.frontend.onnx import load_model
    from kiln.npu.run_report import run_report

    if Target.parse(target).kind != "npu-sim":
        raise KilnError(f"kiln bench --target takes npu-sim (the simulated accelerator), got {target!r}; "
                        f"CPU targets are timed without --target")
    if runs < 1:
        raise InputError(f"--runs must be >= 1, got {runs}")
    mod = kiln.from_onnx(with_fixed_dims(load_model(model), dims, say))
    feeds = random_feeds(mod, {}, {}, seed)
    t0 = time.perf_counter()
    built = kiln.build(mod, target, opt_level=opt_level)
    say(f"built for npu-sim in {time.perf_counter() - t0:.2f} s: {built.report.kernels} accelerator kernel(s)")
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        outs = built.run(feeds)
        times.append(time.perf_counter() - t0)
    lines = run_report(built, float(np.median(times)))
    ref = kiln.evaluate(mod, feeds)
    diff = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in zip(outs, ref))
    lines.append(f"max |diff| vs interpreter: {diff:.3g}")
    for line in lines:
        say(line)
    return lines
