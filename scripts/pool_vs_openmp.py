"""Kiln's thread pool against OpenMP: each benchmark model built with -threading=kiln and with
-threading=openmp, timed alone in a process of its own, the two taking turns (kiln, openmp, kiln, ...)
so that drifts in machine speed hit both; per (model, threads) the median of each turn's median and the
ratio kiln/openmp (below 1: Kiln's pool is faster). The issue's bar: no model slower. Usage:

    .venv/bin/python scripts/pool_vs_openmp.py --models mlp resnet18 --threads 1 2 --turns 5 --json out.json

A turn's process builds its model (from the compile cache after the first turn), runs it --warmup
times, then --runs timed runs, and prints their median in ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

MODELS = ("resnet18", "resnet50", "mobilenet_v2", "bert", "mlp")
MODES = ("kiln", "openmp")


def feeds_for(model) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    out = {}
    for vi in model.graph.input:
        tt = vi.type.tensor_type
        shape = [d.dim_value for d in tt.shape.dim]
        out[vi.name] = rng.integers(0, 1000, shape).astype(np.int64) if tt.elem_type == 7 \
            else rng.standard_normal(shape).astype(np.float32)
    return out


def turn(name: str, mode: str, threads: int, batch: int, warmup: int, runs: int) -> float:
    """Median ms of `runs` runs of model `name` built with `mode` threading, in this process."""
    import kiln
    from kiln import models

    model = getattr(models, name)(batch=batch)
    sess = kiln.InferenceSession(kiln.build(model, target=kiln.Target.parse(f"c -threading={mode}")), threads=threads)
    feeds = feeds_for(model)
    for _ in range(warmup):
        sess.run(None, feeds)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def run_turn(name: str, mode: str, threads: int, args: argparse.Namespace) -> float:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--turn", name, mode, str(threads), "--batch",
           str(args.batch), "--warmup", str(args.warmup), "--runs", str(args.runs)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{name} {mode} {threads} threads failed:\n{proc.stderr[-2000:]}")
    return float(proc.stdout.strip().splitlines()[-1])


def compare(args: argparse.Namespace) -> list[dict]:
    rows = []
    for name in args.models:
        for threads in args.threads:
            medians: dict[str, list[float]] = {m: [] for m in MODES}
            for t in range(args.turns):
                for mode in (MODES if t % 2 == 0 else MODES[::-1]):
                    medians[mode].append(run_turn(name, mode, threads, args))
            ms = {m: statistics.median(v) for m, v in medians.items()}
            row = {"model": name, "threads": threads, "batch": args.batch, "kiln_ms": ms["kiln"],
                   "openmp_ms": ms["openmp"], "ratio": ms["kiln"] / ms["openmp"], "turns": medians}
            print(f"{name:14s} {threads} thread(s): kiln {ms['kiln']:9.3f} ms  openmp {ms['openmp']:9.3f} ms  "
                  f"kiln/openmp {row['ratio']:.3f}", flush=True)
            rows.append(row)
    ratios = [r["ratio"] for r in rows]
    if ratios:
        print(f"geomean kiln/openmp {float(np.exp(np.mean(np.log(ratios)))):.3f}; slowest {max(ratios):.3f}")
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    p.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--turns", type=int, default=5, help="processes per engine, taking turns (default 5)")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--runs", type=int, default=50, help="timed runs per turn (default 50)")
    p.add_argument("--json", metavar="FILE", help="write every turn's median")
    p.add_argument("--turn", nargs=3, metavar=("MODEL", "MODE", "THREADS"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.turn:
        name, mode, threads = args.turn
        print(f"{turn(name, mode, int(threads), args.batch, args.warmup, args.runs):.4f}")
        return 0
    rows = compare(args)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
