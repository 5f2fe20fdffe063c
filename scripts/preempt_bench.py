"""What preemptible runs cost and how fast they stop (issue 27), on the benchmark models built for Kiln's
thread pool (target option -threading=kiln):

(a) checkpoint cost: plain runs (kiln_model_run) against runs through the preemptible entry
    (AotExecutor.start(...).run(): kiln_model_run_from, kiln_run_enter_step before every step, the run
    handle's Python), taking turns (kiln.bench.alternate); medians and their ratio (goal <= 1.01).
(b) cancel latency: runs start at the model's longest step (by kiln_model_profile) on --cores cores;
    a second thread, spinning on its own core, cancels each at a random time inside that kernel; the
    time from the cancel() call to run() returning preempted, p50 and p99 in microseconds (goal p99
    <= 100 us). It includes the Python around both calls, so it bounds the pool's own latency from
    above; "stop" columns are the same cancels to the pool's stamp of the kernels stopped
    (PreemptibleRun.wait_stopped), without the way back into Python. A run that finished that
    kernel before the cancel came is a miss: left out and counted, and another run is tried (up to
    MAX_TRIES per sample).
(c) with --check-cost: the checkpoints inside chunks (kiln.codegen.c_launch.CHECK_OPS) cost every run,
    plain ones too, so (a) does not see them: the model built again without them (CHECK_OPS out of
    reach, both builds inside a knob context so the kernel cache, whose key does not see CHECK_OPS,
    is bypassed) and plain runs of the two taking turns; the ratio with/without (goal <= 1.01).

    .venv/bin/python scripts/preempt_bench.py --models mlp resnet18 --runs 50 --samples 200 --check-cost --json out.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

MODELS = ("resnet18", "resnet50", "mobilenet_v2", "bert", "mlp")
MAX_TRIES = 10  # cancelled runs per sample asked for, at most (a short kernel is often missed)


@dataclass
class Row:
    model: str
    plain_ms: float = 0.0
    preemptible_ms: float = 0.0
    ratio: float = 0.0
    longest_step: int = -1
    longest_kernel: str = ""
    longest_kernel_ms: float = 0.0
    cancel_us: list[float] = field(default_factory=list)
    stop_us: list[float] = field(default_factory=list)  # cancel to the pool's stamp
    misses: int = 0
    checks_ratio: float = float("nan")  # plain runs with the in-chunk checkpoints / without them

    def percentile(self, q: float, stop: bool = False) -> float:
        us = self.stop_us if stop else self.cancel_us
        return float(np.percentile(us, q)) if us else float("nan")


def build(name: str, batch: int) -> tuple[Any, dict[str, np.ndarray]]:
    """The model built for Kiln's pool (AOT) and random feeds for it."""
    import kiln
    import kiln.models as M
    from kiln.feeds import random_feeds
    from kiln.target import Target

    model = getattr(M, name)(batch=batch)
    cm = kiln.build(model, target=dataclasses.replace(Target.host(), threading="kiln"))
    if cm.executor != "aot":
        raise SystemExit(f"{name}: built for the {cm.executor} executor; preemption needs an AOT build")
    return cm.runner, random_feeds(kiln.from_onnx(model), {}, {})


def checkpoint_cost(aot: Any, feeds: dict[str, np.ndarray], runs: int, row: Row) -> None:
    from kiln.bench import Engine, alternate

    def preemptible() -> list:
        return aot.start(feeds).run().outputs

    plain = aot.run(feeds)
    if not all(np.array_equal(a, b) for a, b in zip(plain, preemptible())):
        raise SystemExit(f"{row.model}: the preemptible entry's outputs differ from kiln_model_run's")
    engines = [Engine("plain", lambda: aot.run(feeds)), Engine("preemptible", preemptible)]
    alternate(engines, runs)
    row.plain_ms, row.preemptible_ms = (statistics.median(e.times) * 1e3 for e in engines)
    row.ratio = row.preemptible_ms / row.plain_ms


def check_cost(name: str, batch: int, runs: int, row: Row) -> None:
    """(c): plain runs of the model built with and without checkpoints inside chunks, taking turns."""
    from kiln.bench import Engine, alternate
    from kiln.codegen import c_launch
    from kiln.topi.knobs import applying

    engines = []
    for label, check_ops in (("checks", c_launch.CHECK_OPS), ("no checks", 10 ** 30)):
        saved, c_launch.CHECK_OPS = c_launch.CHECK_OPS, check_ops
        try:
            with applying({}):  # NOTE: both variants bypass the kernel cache (see the module doc)
                aot, feeds = build(name, batch)
        finally:
            c_launch.CHECK_OPS = saved
        engines.append(Engine(label, lambda aot=aot, feeds=feeds: aot.run(feeds)))
    alternate(engines, runs)
    with_checks, without = (statistics.median(e.times) for e in engines)
    row.checks_ratio = with_checks / without


def cancel_latency(aot: Any, feeds: dict[str, np.ndarray], samples: int, cores: int, row: Row) -> None:
    """Cancel `samples` runs at random times inside the longest step; see the module doc."""
    from kiln.runtime.pool_runs import PoolRuns
    from kiln.runtime.thread_pool import Partition

    steps = [s for _, s in aot.profile(feeds, 10)]
    k = max(range(len(steps)), key=steps.__getitem__)
    row.longest_step, row.longest_kernel = k, aot.memory_report().order[k]
    row.longest_kernel_ms = steps[k] * 1e3
    control = PoolRuns(Partition(0, cores))
    for _ in range(MAX_TRIES * samples):
        if len(row.cancel_us) == samples:
            break
        lat = _one_cancel(aot, feeds, control, k, random.uniform(0.0, 0.9) * steps[k])
        if lat is None:
            row.misses += 1
        else:
            row.cancel_us.append(lat[0] * 1e6)
            row.stop_us.append(lat[1] * 1e6)


def _one_cancel(aot: Any, feeds: dict[str, np.ndarray], control: Any, k: int,
                delay: float) -> tuple[float, float] | None:
    """Seconds from cancel() to run() returning and to the pool's stamp, for a run that starts at step
    k and is cancelled `delay` seconds after its entry call began; None when it did not stop in step k."""
    from kiln.runtime.run_handle import RunState

    aot.run(feeds)
    run = aot.start(feeds, control)
    # NOTE: private on purpose: the run starts at step k over the arena the plain run above just
    # filled (the pool hands out the arena freed last), so kernel k reads that run's real tensors
    run._step = k
    t: dict[str, float] = {}

    def canceller() -> None:
        # spins (a sleep wakes tens of microseconds late), letting go of the GIL on every turn so the
        # running thread is not kept from its entry call
        while not run._bound:  # set just before the entry call
            if run.state not in (RunState.READY, RunState.RUNNING):  # it ran through unseen
                return
            time.sleep(0)
        until = time.perf_counter() + delay
        while time.perf_counter() < until:
            time.sleep(0)
        t["cancel"] = time.perf_counter()
        run.cancel()

    thread = threading.Thread(target=canceller)
    thread.start()
    result = run.run()
    t["return"] = time.perf_counter()
    thread.join()
    stopped = run.wait_stopped(0.0)
    run.close()
    if result.preempted_at != k or "cancel" not in t or stopped is None:
        return None
    return t["return"] - t["cancel"], stopped - t["cancel"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--runs", type=int, default=50, help="timed runs of each entry for (a)")
    p.add_argument("--samples", type=int, default=200, help="cancelled runs per model for (b)")
    p.add_argument("--cores", type=int, default=max(1, os.cpu_count() - 1),
                   help="pool cores the runs of (b) use; the default leaves one to the cancelling thread")
    p.add_argument("--check-cost", action="store_true", help="also (c): builds each model twice more")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    rows = []
    print(f"{'model':14} {'plain ms':>9} {'preempt ms':>10} {'ratio':>6}  {'longest kernel':32} "
          f"{'ms':>7} {'p50 us':>7} {'p99 us':>7} {'stop p50':>8} {'stop p99':>8} {'misses':>6} {'checks':>6}",
          flush=True)
    for name in args.models:
        aot, feeds = build(name, args.batch)
        row = Row(name)
        checkpoint_cost(aot, feeds, args.runs, row)
        cancel_latency(aot, feeds, args.samples, args.cores, row)
        if args.check_cost:
            check_cost(name, args.batch, args.runs, row)
        rows.append(row)
        print(f"{name:14} {row.plain_ms:9.3f} {row.preemptible_ms:10.3f} {row.ratio:6.3f}  "
              f"{row.longest_kernel[:32]:32} {row.longest_kernel_ms:7.3f} {row.percentile(50):7.1f} "
              f"{row.percentile(99):7.1f} {row.percentile(50, True):8.1f} {row.percentile(99, True):8.1f} "
              f"{row.misses:6d} {row.checks_ratio:6.3f}", flush=True)
    if args.json:
        args.json.write_text(json.dumps([dict(dataclasses.asdict(r), p50_us=r.percentile(50), p99_us=r.percentile(99),
                                              stop_p50_us=r.percentile(50, True), stop_p99_us=r.percentile(99, True))
                                         for r in rows], indent=1))


if __name__ == "__main__":
    main()
