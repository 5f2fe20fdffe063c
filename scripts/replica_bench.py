"""What the Ray path adds to a request, and how throughput scales with replicas (issue 29, deliverable 5).

    .venv/bin/python scripts/replica_bench.py [--model mlp|small_cnn|FILE.onnx] [--requests 500]
                                              [--replicas 1,2] [--window 8] [--threads 1] [--cpus N]
                                              [--address ADDRESS] [--json OUT.json]

Overhead: the same compiled model run one request at a time in this process (model.run), through a
ReplicaSet of one replica ("ray": an actor call each, arguments and answer through Ray) and as a plain
`ray.get(actor.run.remote(...))` on that replica ("actor_call": Ray's own cost), taking turns in rounds
so that drift on a shared machine hits all; p50 and p99 of each and "ray" minus in-process.
Throughput: for each replica count, `--requests` requests with `--window` in flight at once (a closed
loop), requests per second. A replica is one process of `--threads` cores: N replicas scale only while
the machine has N x threads cores to spare beside the driver and Ray's own processes, so on 2 cores
expect 2 replicas to add little or nothing to 1 (the report prints the cores it ran on).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import wait
from typing import TYPE_CHECKING

import numpy as np

import kiln
from kiln.distributed.ray_env import connect
from kiln.distributed.replica_set import ReplicaSet
from kiln.models import small_cnn
from kiln.serve.repository import SERVE_TARGET

if TYPE_CHECKING:
    from kiln.runtime.model import Model

ROUNDS = 10
WARMUP = 5


def load(spec: str, threads: int) -> Model:
    """The model to measure: a built-in one by name or an ONNX file, compiled for `threads` cores."""
    target = f"{SERVE_TARGET} -cores={threads}"
    if spec == "mlp":
        from kiln.models.mlp import mlp

        return kiln.build(mlp(batch=1, sizes=(784, 1024, 1024, 10)), target=target)
    if spec == "small_cnn":
        return kiln.build(small_cnn(batch=1), target=target)
    return kiln.build(spec, target=target)


def feeds_of(model: Model) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {i.name: rng.standard_normal(i.shape).astype(i.dtype) for i in model.inputs}


def latencies(call: Callable[[], object], n: int) -> list[float]:
    for _ in range(WARMUP):
        call()
    out = []
    for _ in range(n):
        start = time.perf_counter()
        call()
        out.append(time.perf_counter() - start)
    return out


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) * 1e3


def overhead(model: Model, replicas: ReplicaSet, feeds: dict, requests: int) -> dict:
    """p50/p99 in ms of in-process runs, of one-replica calls and of plain calls to the same actor (what
    Ray itself costs, without the set's routing and Futures), taking turns over ROUNDS rounds."""
    import ray

    actor = replicas.actor(0)
    ways: dict[str, list[float]] = {"in_process": [], "ray": [], "actor_call": []}
    calls = {"in_process": lambda: model.run(feeds), "ray": lambda: replicas.run(None, feeds),
             "actor_call": lambda: ray.get(actor.run.remote(feeds))}
    per_round = max(1, requests // ROUNDS)
    for _ in range(ROUNDS):
        for way, call in calls.items():
            ways[way] += latencies(call, per_round)
    report = {way: {"p50_ms": percentile(t, 50), "p99_ms": percentile(t, 99)} for way, t in ways.items()}
    report["overhead"] = {k: report["ray"][k] - report["in_process"][k] for k in ("p50_ms", "p99_ms")}
    return report


def throughput(replicas: ReplicaSet, feeds: dict, requests: int, window: int) -> float:
    """Requests per second with `window` requests in flight until `requests` are answered."""
    for f in [replicas.submit(feeds) for _ in range(WARMUP * replicas.replicas)]:
        f.result()
    start, sent, pending = time.perf_counter(), 0, set()
    while sent < requests or pending:
        while sent < requests and len(pending) < window:
            pending.add(replicas.submit(feeds))
            sent += 1
        done, pending = wait(pending, return_when="FIRST_COMPLETED")
        for f in done:
            f.result()
    return requests / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="mlp", help="mlp, small_cnn or an .onnx file (default mlp)")
    p.add_argument("--requests", type=int, default=500, help="requests per measurement (default 500)")
    p.add_argument("--replicas", default="1,2", help="replica counts to measure throughput for (default 1,2)")
    p.add_argument("--window", type=int, default=8, help="requests in flight in the throughput loop (default 8)")
    p.add_argument("--threads", type=int, default=1, help="cores of each replica (default 1)")
    p.add_argument("--cpus", type=int, default=None, help="CPUs of the local Ray cluster (default: every core)")
    p.add_argument("--address", default=None, help="an existing Ray cluster instead of a local one")
    p.add_argument("--json", metavar="FILE", help="write the numbers as JSON")
    args = p.parse_args(argv)
    counts = [int(c) for c in args.replicas.split(",")]
    connect(args.address, args.cpus)
    model = load(args.model, args.threads)
    feeds = feeds_of(model)
    report: dict = {"model": args.model, "cores": os.cpu_count(), "threads_per_replica": args.threads,
                    "requests": args.requests, "window": args.window, "throughput_rps": {}}
    one = ReplicaSet(model, replicas=1, threads=args.threads, name="bench")
    report.update(overhead(model, one, feeds, args.requests))
    one.close()
    for n in counts:
        replicas = ReplicaSet(model, replicas=n, threads=args.threads, name=f"bench{n}")
        report["throughput_rps"][n] = throughput(replicas, feeds, args.requests, args.window)
        replicas.close()
    print_report(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    return 0


def print_report(r: dict) -> None:
    print(f"model {r['model']} on {r['cores']} cores, {r['threads_per_replica']} thread(s) per replica")
    for way in ("in_process", "actor_call", "ray", "overhead"):
        print(f"  {way:<11} p50 {r[way]['p50_ms']:8.3f} ms   p99 {r[way]['p99_ms']:8.3f} ms")
    base = next(iter(r["throughput_rps"].values()))
    for n, rps in r["throughput_rps"].items():
        print(f"  {n} replica(s): {rps:9.1f} requests/s ({rps / base:.2f}x)")
    if max(r["throughput_rps"]) * r["threads_per_replica"] >= (r["cores"] or 1):
        print("  note: replicas x threads reach this machine's cores; the driver and Ray share them too",
              file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
