"""The dataflow executor against compiled sequential (AOT) on the branching models (kiln.models:
ensemble, inception_net, multi_head), at one batch size on a few cores (default: batch 1, 2 cores).

Each executor runs in its own process, pinned to the same first `--cores` CPUs and built for a
target with that many cores; the processes take turns (a turn: untimed runs for --settle seconds,
then --burst timed runs, as kiln.bench.alternate does), so neither is timed against the other's
threads and machine noise hits both alike. The table gives medians, p90, the sequential/dataflow
ratio (above 1: dataflow is faster), the ratio the cost model predicted (kiln.compiler.dataflow_choice)
and what `executor="auto"` picks. Both processes' outputs must be identical. Usage:

    .venv/bin/python scripts/dataflow_bench.py --models ensemble inception_net multi_head --runs 200 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

MODELS = ("ensemble", "inception_net", "multi_head")
EXECUTORS = ("aot", "dataflow")


def serve(model: str, batch: int, cores: int, executor: str) -> None:
    """The child: build, then answer 'turn SETTLE BURST' lines with the burst's times (JSON lines)."""
    import time

    import kiln
    from kiln import models
    from kiln.codegen import openmp_env

    os.sched_setaffinity(0, range(cores))
    compiled = kiln.build(getattr(models, model)(batch=batch), target=f"c -cores={cores}", executor=executor)
    auto = kiln.build(getattr(models, model)(batch=batch), target=f"c -cores={cores}").executor
    set_threads = openmp_env.set_num_threads(compiled.library)
    if set_threads is not None:  # the dataflow crew sets its own threads' counts during its runs
        set_threads(cores)
    feeds = {i.name: np.random.default_rng(0).standard_normal(i.shape).astype(np.float32) for i in compiled.inputs}
    outs = compiled.run(feeds)
    note = getattr(getattr(compiled.runner, "schedule", None), "note", "")
    print(json.dumps({"outputs": [o.tolist() for o in outs], "note": note, "auto": auto}), flush=True)
    for line in sys.stdin:
        settle_s, burst = float(line.split()[1]), int(line.split()[2])
        t_end = time.perf_counter() + settle_s
        while time.perf_counter() < t_end:
            compiled.run(feeds)
        times = []
        for _ in range(burst):
            t0 = time.perf_counter()
            compiled.run(feeds)
            times.append(time.perf_counter() - t0)
        print(json.dumps(times), flush=True)


def bench(model: str, args: argparse.Namespace) -> dict:
    children = {}
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    for executor in EXECUTORS:
        cmd = [sys.executable, __file__, "--serve", model, "--batch", str(args.batch), "--cores", str(args.cores),
               "--executor", executor]
        children[executor] = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                              env=env)
    hello = {e: json.loads(c.stdout.readline()) for e, c in children.items()}
    same = all(np.array_equal(np.array(a), np.array(b))
               for a, b in zip(hello["aot"]["outputs"], hello["dataflow"]["outputs"]))
    times: dict[str, list[float]] = {e: [] for e in EXECUTORS}
    while min(len(t) for t in times.values()) < args.runs:
        for e, c in children.items():
            c.stdin.write(f"turn {args.settle} {args.burst}\n")
            c.stdin.flush()
            times[e] += json.loads(c.stdout.readline())
    for c in children.values():
        c.stdin.close()
        c.wait()
    med = {e: float(np.median(t)) * 1e3 for e, t in times.items()}
    return {"model": model, "batch": args.batch, "cores": args.cores, "same_outputs": same,
            "median_ms": med, "p90_ms": {e: float(np.percentile(t, 90)) * 1e3 for e, t in times.items()},
            "ratio": med["aot"] / med["dataflow"], "predicted": hello["dataflow"]["note"],
            "auto": hello["aot"]["auto"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--runs", type=int, default=200, help="timed runs per executor")
    p.add_argument("--burst", type=int, default=20, help="timed runs per turn")
    p.add_argument("--settle", type=float, default=0.1, help="untimed seconds at the start of a turn")
    p.add_argument("--json", metavar="FILE", help="write every number here")
    p.add_argument("--serve", metavar="MODEL", help=argparse.SUPPRESS)
    p.add_argument("--executor", choices=EXECUTORS, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        serve(args.serve, args.batch, args.cores, args.executor)
        return
    rows = []
    print(f"batch {args.batch}, {args.cores} cores; medians (p90) in ms; ratio = sequential / dataflow")
    for model in args.models:
        r = bench(model, args)
        rows.append(r)
        m, q = r["median_ms"], r["p90_ms"]
        print(f"{model:14s} sequential {m['aot']:8.3f} ({q['aot']:.3f})  dataflow {m['dataflow']:8.3f} "
              f"({q['dataflow']:.3f})  ratio {r['ratio']:.2f}  auto: {r['auto']}  same outputs: {r['same_outputs']}\n"
              f"{'':14s} cost model: {r['predicted']}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
