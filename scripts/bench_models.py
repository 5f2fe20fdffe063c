"""The model benchmark of the performance issue: Kiln (untuned, and tuned with --records) vs ONNX
Runtime vs PyTorch eager on resnet18, resnet50, mobilenet_v2, a BERT-style encoder (6 layers, hidden
384, 12 heads, seq 128) and a 784-1024-1024-10 MLP (and, when asked, EfficientNet-B0 and a GPT-style
decoder), at each batch size and thread count asked for.

Engines take turns (kiln.bench.alternate: untimed runs for 100 ms, then --burst timed runs of each, repeated)
so machine noise hits them alike and no engine is timed against another's spinning threads; the table
gives medians, p90, Kiln/ORT ratios, achieved GFLOP/s (conv/matmul/gemm work) and the percentage of
this machine's FP32 FMA peak, measured in the same run (scripts/machine_limits.py). Every engine's
outputs are checked against ONNX Runtime's. --json writes every number. Usage:

    .venv/bin/python scripts/bench_models.py --models mlp resnet18 --batch 1 8 --threads 1 2 --json out.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

MODELS = ("resnet18", "resnet50", "mobilenet_v2", "bert", "mlp")  # the performance issue's set (the default)
EXTRA = ("efficientnet_b0", "gpt")  # other architectures: SiLU and squeeze-excite; a causal decoder


@dataclass
class Row:
    model: str
    batch: int
    threads: int
    gflop: float
    build_s: dict[str, float] = field(default_factory=dict)
    median_ms: dict[str, float] = field(default_factory=dict)
    p90_ms: dict[str, float] = field(default_factory=dict)
    max_diff_vs_ort: dict[str, float] = field(default_factory=dict)
    host_groups: int = 0


def make_model(name: str, batch: int):
    import kiln.models as M

    return getattr(M, name)(batch=batch)


def feeds_for(model, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for vi in model.graph.input:
        tt = vi.type.tensor_type
        shape = [d.dim_value for d in tt.shape.dim]
        if tt.elem_type == 7:  # int64 token ids
            out[vi.name] = rng.integers(0, 1000, shape).astype(np.int64)
        else:
            out[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def engines(model, feeds, threads: int, records: str | None, opt_level: int, row: Row) -> dict:
    import onnxruntime as ort

    import kiln

    mod = kiln.from_onnx(model)
    out = {}
    t0 = time.perf_counter()
    sess = kiln.InferenceSession(kiln.build(mod, opt_level=opt_level), threads=threads)
    row.build_s["kiln"] = time.perf_counter() - t0
    row.host_groups = len(sess.model.host_groups)
    out["kiln"] = lambda: sess.run(None, feeds)
    if records:
        t0 = time.perf_counter()
        tuned = kiln.InferenceSession(kiln.build(mod, opt_level=opt_level, records=records), threads=threads)
        row.build_s["kiln_tuned"] = time.perf_counter() - t0
        out["kiln_tuned"] = lambda: tuned.run(None, feeds)
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    ort_sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    out["onnxruntime"] = lambda: ort_sess.run(None, feeds)
    try:
        from torch_eager import EagerReplay

        eager = EagerReplay(model, threads)
    except ImportError:
        print("  torch is not installed (pip install torch==2.13.0): PyTorch eager skipped")
    else:
        out["torch_eager"] = lambda: eager.run(feeds)
    return out


def measure(name: str, batch: int, threads: int, runs: int, warmup: int, records: str | None,
            opt_level: int, burst: int) -> Row:
    import kiln
    from kiln.bench import Engine, alternate
    from kiln.compiler.flop_count import flop_count

    model = make_model(name, batch)
    feeds = feeds_for(model)
    row = Row(name, batch, threads, flop_count(kiln.from_onnx(model)) / 1e9)
    eng = engines(model, feeds, threads, records, opt_level, row)
    ref = [np.asarray(o) for o in eng["onnxruntime"]()]
    for k, f in eng.items():
        outs = f()
        row.max_diff_vs_ort[k] = max(float(np.max(np.abs(np.asarray(a, np.float64) - b))) for a, b in zip(outs, ref))
    for _ in range(warmup):
        for f in eng.values():
            f()
    timed = [Engine(k, f) for k, f in eng.items()]
    alternate(timed, runs, burst, deadline_s=120)  # a slow engine must not hold the whole benchmark
    for e in timed:
        row.median_ms[e.name] = float(np.median(e.times)) * 1e3
        row.p90_ms[e.name] = float(np.percentile(e.times, 90)) * 1e3
    return row


def peaks() -> dict[str, float]:
    import machine_limits as ml

    dll = ml.build()
    return {f"fma_peak_gflops_{t}t": ml.fma_gflops(dll, t, 50_000_000) for t in sorted({1, os.cpu_count() or 1})}


def table(rows: list[Row], peak: dict[str, float]) -> str:
    engines_seen = list(dict.fromkeys(k for r in rows for k in r.median_ms))
    head = f"{'model':13s} {'b':>2s} {'t':>2s} " + " ".join(f"{e + ' ms':>16s}" for e in engines_seen)
    head += f" {'kiln/ort':>9s} {'GFLOP/s':>8s} {'% peak':>7s}"
    lines = [head]
    for r in rows:
        cells = " ".join(f"{r.median_ms.get(e, math.nan):16.3f}" for e in engines_seen)
        k, o = r.median_ms.get("kiln_tuned", r.median_ms["kiln"]), r.median_ms["onnxruntime"]
        gf = r.gflop / (k * 1e-3) if k else 0.0
        p = peak.get(f"fma_peak_gflops_{r.threads}t") or max(peak.values())
        lines.append(f"{r.model:13s} {r.batch:2d} {r.threads:2d} {cells} {k / o:9.2f} {gf:8.1f} {100 * gf / p:6.1f}%")
    ratios = [r.median_ms.get("kiln_tuned", r.median_ms["kiln"]) / r.median_ms["onnxruntime"] for r in rows]
    if ratios:
        lines.append(f"geomean kiln/ort: {math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS + EXTRA)
    p.add_argument("--batch", nargs="+", type=int, default=[1, 8])
    p.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--burst", type=int, default=5, help="timed runs per turn (after 100 ms of untimed runs)")
    p.add_argument("--opt-level", type=int, default=3)
    p.add_argument("--records", help="tuning records (kiln tune): also benchmark the tuned build")
    p.add_argument("--json", help="write every number here")
    args = p.parse_args()
    peak = peaks()
    print("machine: " + ", ".join(f"{k} {v:.1f}" for k, v in peak.items()))
    rows = []
    for name in args.models:
        for b in args.batch:
            for t in args.threads:
                row = measure(name, b, t, args.runs, args.warmup, args.records, args.opt_level, args.burst)
                print(f"  {name} batch {b} threads {t}: " + ", ".join(f"{k} {v:.3f} ms"
                                                                        for k, v in row.median_ms.items()), flush=True)
                rows.append(row)
    print(table(rows, peak))
    if args.json:
        tmp = Path(args.json + ".tmp")
        tmp.write_text(json.dumps({"peak": peak, "rows": [asdict(r) for r in rows]}, indent=2))
        os.replace(tmp, args.json)


if __name__ == "__main__":
    main()
