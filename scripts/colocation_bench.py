"""Co-location benchmarks of the runtime issue: Kiln sharing a process with ONNX Runtime, and two Kiln
models sharing a process.

1. `coloc`: Kiln and ONNX Runtime in ONE process, runs alternating one by one (no settling between
   them: each runtime's idle workers are still spinning when the other starts), `--threads` each.
   Kiln's median there is divided by its median ALONE in a process (`solo`). Goal: <= 1.1.
2. `pair`: two Kiln models in one process, driven from two Python threads, 1 thread each, for a fixed
   time; each model's runs/s there divided by its runs/s alone on 1 thread, and the mean of the two
   (models of different sizes: a sum of raw runs/s would be the small model's alone). Goal: >= 0.9.

Every measurement is its own process, and the kinds take turns (solo, coloc, solo, coloc, ...), so
machine noise hits them alike; medians over rounds. Usage:

    .venv/bin/python scripts/colocation_bench.py --models mlp resnet18 --target "c -threading=kiln" --json out.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

MODELS = ("resnet18", "resnet50", "mobilenet_v2", "bert", "mlp")


def _session(name: str, target: str | None, threads: int):
    import kiln
    from bench_models import feeds_for, make_model

    model = make_model(name, 1)
    feeds = feeds_for(model)
    sess = kiln.InferenceSession(kiln.build(kiln.from_onnx(model), target), threads=threads)
    return model, feeds, sess


def _ort(model, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _timed(run, seconds: float, min_runs: int = 20) -> list[float]:
    out: list[float] = []
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end or len(out) < min_runs:
        t0 = time.perf_counter()
        run()
        out.append(time.perf_counter() - t0)
    return out


def child_solo(name: str, target: str | None, threads: int, seconds: float) -> dict:
    _, feeds, sess = _session(name, target, threads)
    _timed(lambda: sess.run(None, feeds), 0.3, 3)
    return {"kiln_ms": 1e3 * float(np.median(_timed(lambda: sess.run(None, feeds), seconds)))}


def child_coloc(name: str, target: str | None, threads: int, seconds: float) -> dict:
    model, feeds, sess = _session(name, target, threads)
    ort_sess = _ort(model, threads)
    k_times: list[float] = []
    o_times: list[float] = []
    t_end = time.perf_counter() + seconds
    for i in range(10**9):
        if time.perf_counter() > t_end and i >= 40:
            break
        for run, times in ((lambda: sess.run(None, feeds), k_times), (lambda: ort_sess.run(None, feeds), o_times)):
            t0 = time.perf_counter()
            run()
            if i >= 4:  # the first runs warm both
                times.append(time.perf_counter() - t0)
    return {"kiln_ms": 1e3 * float(np.median(k_times)), "ort_ms": 1e3 * float(np.median(o_times))}


def child_rate(names: list[str], target: str | None, seconds: float) -> dict:
    """Runs per second of each model, all driven at once from one Python thread each, 1 thread each."""
    sessions = [_session(n, target, 1) for n in names]
    for _, feeds, sess in sessions:
        sess.run(None, feeds)
    counts = [0] * len(sessions)
    t_end = time.perf_counter() + seconds

    def drive(i: int) -> None:
        _, feeds, sess = sessions[i]
        while time.perf_counter() < t_end:
            sess.run(None, feeds)
            counts[i] += 1

    workers = [threading.Thread(target=drive, args=(i,)) for i in range(len(sessions))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return {"runs_per_s": [c / seconds for c in counts]}


def _spawn(*args: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"child {args} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=list(MODELS))
    p.add_argument("--pair", nargs=2, metavar="MODEL", help="the two models of the pair test (default: the first "
                   "two of --models, or the one model twice)")
    p.add_argument("--target", default=None, help="Kiln's target string (e.g. 'c -threading=kiln')")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=2.0, help="timed seconds per measurement process")
    p.add_argument("--json", help="write every number here")
    p.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = p.parse_args()
    target = args.target or None
    if args.child:
        kind, *rest = args.child
        if kind == "rate":
            res = child_rate(rest, target, args.seconds)
        else:
            res = {"solo": child_solo, "coloc": child_coloc}[kind](rest[0], target, args.threads, args.seconds)
        print(json.dumps(res))
        return
    result: dict = {"target": target, "threads": args.threads, "coloc": {}, "pair": {}}
    for name in args.models:
        solo, coloc = [], []
        for _ in range(args.rounds):
            solo.append(_spawn("solo", name, *_common(args)))
            coloc.append(_spawn("coloc", name, *_common(args)))
        s = float(np.median([r["kiln_ms"] for r in solo]))
        c = float(np.median([r["kiln_ms"] for r in coloc]))
        o = float(np.median([r["ort_ms"] for r in coloc]))
        result["coloc"][name] = {"solo_ms": s, "coloc_ms": c, "ort_coloc_ms": o, "ratio": c / s}
        print(f"{name:13s} alone {s:8.3f} ms  beside ORT {c:8.3f} ms  x{c / s:.2f}  (ORT there {o:.3f} ms)",
              flush=True)
    a, b = args.pair or (args.models[:2] if len(args.models) > 1 else args.models * 2)
    alone_a, alone_b, with_a, with_b = [], [], [], []
    for _ in range(args.rounds):
        alone_a.append(_spawn("rate", a, *_common(args))["runs_per_s"][0])
        alone_b.append(_spawn("rate", b, *_common(args))["runs_per_s"][0])
        ta, tb = _spawn("rate", a, b, *_common(args))["runs_per_s"]
        with_a.append(ta)
        with_b.append(tb)
    ra, rb, ta, tb = (float(np.median(x)) for x in (alone_a, alone_b, with_a, with_b))
    ratios = [ta / ra, tb / rb]
    result["pair"] = {"models": [a, b], "alone_runs_per_s": [ra, rb], "together_runs_per_s": [ta, tb],
                      "ratios": ratios, "mean_ratio": float(np.mean(ratios))}
    print(f"pair {a}+{b}, 1 thread each: alone {ra:.1f} and {rb:.1f} runs/s, together {ta:.1f} and {tb:.1f} "
          f"runs/s: x{ratios[0]:.2f}, x{ratios[1]:.2f}, mean x{np.mean(ratios):.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


def _common(args: argparse.Namespace) -> list[str]:
    out = ["--threads", str(args.threads), "--seconds", str(args.seconds)]
    return out + (["--target", args.target] if args.target else [])


if __name__ == "__main__":
    main()
