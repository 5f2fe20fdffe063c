"""Kiln on Ray, pipelined (issue 29): the Ray path's cost per request and a pipeline's throughput.

For each stage count K (default 1 and 2) and each way of calling the stages (classic actor calls,
Ray's compiled graphs), a Pipeline of the model is built on a local Ray cluster (or --address) with
--threads-per-stage cores a stage, and measured three ways:
  latency: one request at a time, --runs of them; p50/p99, and the overhead over the same model run in
           this process on as many threads as one stage has (the issue's goals: K=2 <= 1.5 ms p50
           classic, <= 0.3 ms compiled graphs);
  throughput: --requests requests kept --inflight at a time (requests/s), against K=1;
  bytes: per stage, the bytes a request brings in and hands on (classic actors count them).
The default model is a balanced MLP (4 hidden layers of 2048, batch 1: each layer reads 16 MB of
weights); --model tiny is a small MLP to check the script runs. The issue's throughput goal (K=2 >= 1.6x
K=1 at half the cores a stage) needs >= 4 cores; on fewer, Ray's own processes (raylet, GCS, the
driver's controller) take a core from the stages and the table says so. Usage:

    .venv/bin/python scripts/pipeline_bench.py --threads-per-stage 2 --json pipeline.json
    .venv/bin/python scripts/pipeline_bench.py --model tiny --runs 50 --requests 100
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from typing import Any

import numpy as np

MODELS = {"mlp": (1024, 2048, 2048, 2048, 2048, 10), "tiny": (32, 64, 64, 10)}


def percentiles(seconds: list[float]) -> dict[str, float]:
    ms = np.asarray(seconds) * 1e3
    return {"p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99))}


def latency(run: Any, feeds: dict[str, np.ndarray], runs: int) -> dict[str, float]:
    """One request at a time, after a few untimed ones."""
    for _ in range(5):
        run(feeds)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        run(feeds)
        times.append(time.perf_counter() - t0)
    return percentiles(times)


def throughput(pipe: Any, feeds: dict[str, np.ndarray], requests: int, inflight: int) -> float:
    """Requests a second with `inflight` requests kept submitted."""
    t0 = time.perf_counter()
    window = [pipe.run_async(None, feeds) for _ in range(min(inflight, requests))]
    submitted = len(window)
    while window:
        window.pop(0).result()
        if submitted < requests:
            window.append(pipe.run_async(None, feeds))
            submitted += 1
    return requests / (time.perf_counter() - t0)


def measure(model: Any, stages: int, compiled: bool, feeds: dict[str, np.ndarray], args: argparse.Namespace,
            baseline_p50: float) -> dict[str, Any]:
    from kiln.distributed import Pipeline

    with Pipeline(model, stages=stages, threads_per_stage=args.threads_per_stage, compiled_graph=compiled) as pipe:
        row: dict[str, Any] = {"stages": stages, "calls": "compiled graph" if compiled else "classic"}
        row.update(latency(lambda f: pipe.run(None, f), feeds, args.runs))
        row["overhead_p50_ms"] = row["p50_ms"] - baseline_p50
        row["requests_per_s"] = throughput(pipe, feeds, args.requests, args.inflight)
        if not compiled:
            counts = pipe.stage_counts()
            row["bytes_per_request"] = [{k: c[k] // max(1, c["requests"]) for k in ("bytes_in", "bytes_out")}
                                        for c in counts]
        row["report"] = pipe.report
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="mlp")
    parser.add_argument("--stages", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--threads-per-stage", type=int, default=1)
    parser.add_argument("--runs", type=int, default=300, help="requests timed one at a time")
    parser.add_argument("--requests", type=int, default=500, help="requests of the throughput run")
    parser.add_argument("--inflight", type=int, default=8)
    parser.add_argument("--no-compiled-graph", action="store_true", help="classic actor calls only")
    parser.add_argument("--address", help="a Ray cluster to use (default: a local one with the stages' CPUs)")
    parser.add_argument("--json", help="write the rows here too")
    args = parser.parse_args()

    import ray

    import kiln
    from kiln.models import mlp

    model = mlp(batch=1, sizes=MODELS[args.model])
    x = np.random.default_rng(0).standard_normal((1, MODELS[args.model][0])).astype(np.float32)
    feeds = {"input": x}
    cpus = max(args.stages) * args.threads_per_stage
    ray.init(address=args.address or "local", num_cpus=None if args.address else cpus, include_dashboard=False,
             log_to_driver=False)
    with tempfile.TemporaryDirectory() as tmp:  # loaded as a stage is: a compiled directory, a stage's threads
        whole = kiln.load(kiln.build(model).export(f"{tmp}/whole"), threads=args.threads_per_stage)
    base = latency(lambda f: whole.run(None, f), feeds, args.runs)
    rows: list[dict[str, Any]] = [{"stages": 0, "calls": "in-process", **base}]
    for stages in args.stages:
        for compiled in (False, True) if not args.no_compiled_graph else (False,):
            rows.append(measure(model, stages, compiled, feeds, args, base["p50_ms"]))
    ray.shutdown()
    print_table(rows, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "threads_per_stage": args.threads_per_stage, "cores": os.cpu_count(),
                       "rows": rows}, f, indent=1)


def print_table(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print(f"model {args.model}, {args.threads_per_stage} thread(s) a stage, {os.cpu_count()} cores here")
    one = {r["calls"]: r.get("requests_per_s") for r in rows if r["stages"] == 1}
    print(f"{'K':>2} {'calls':15} {'p50 ms':>8} {'p99 ms':>8} {'over p50':>9} {'req/s':>8} {'vs K=1':>7}")
    for r in rows:
        rate = r.get("requests_per_s")
        ratio = f"{rate / one[r['calls']]:.2f}x" if rate and one.get(r["calls"]) else ""
        print(f"{r['stages']:>2} {r['calls']:15} {r['p50_ms']:8.3f} {r['p99_ms']:8.3f} "
              f"{r.get('overhead_p50_ms', 0.0):9.3f} {rate or 0:8.1f} {ratio:>7}")
        for i, b in enumerate(r.get("bytes_per_request", [])):
            print(f"     stage {i}: {b['bytes_in']} B in, {b['bytes_out']} B out a request")
    if (os.cpu_count() or 1) < 4:
        print("NOTE: fewer than 4 cores: the stages share them with Ray's raylet, GCS and this driver, so K=2 "
              "cannot show the pipeline's speedup here")
    for r in rows:
        if r["stages"] == max(args.stages) and r["calls"] == "classic":
            print(r["report"])


if __name__ == "__main__":
    main()
