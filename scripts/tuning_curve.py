"""How fast tuning converges: the model's latency with the records a tuning run had written after 1, 2,
5, 10, 15 ... minutes, against the untuned build and the run's final records.

The issue's target is "within 10% of the final latency in 15 minutes". Every record carries the time
it was written, so one long `kiln tune` run answers it: this script cuts the records file at each
checkpoint, builds the model with what the cut holds (each workload's best config, with the margin
a build applies), and times all the builds taking turns in one process (kiln.bench.alternate,
medians). Usage:

    kiln tune model.onnx --trials 2000 --opt-level 3 --records r.jsonl   # note the start time
    .venv/bin/python scripts/tuning_curve.py model.onnx r.jsonl --start EPOCH --threads 2 --json out.json

Without --start, the clock starts at the first record (later than the tuner's start by its first
batch's compile and measurement).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def checkpoints(records: list, start: float, minutes: list[float]) -> list[tuple[str, float | None]]:
    """(label, cut time) for each checkpoint the run reached, then the final records (cut None)."""
    end = max(r.timestamp for r in records)
    out = [(f"{m:g} min", start + 60 * m) for m in minutes if start + 60 * m < end]
    return [("untuned", start), *out, ("final", None)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="the .onnx file that was tuned")
    ap.add_argument("records", help="the tuning run's records file")
    ap.add_argument("--start", type=float, help="the run's start (epoch seconds); default: the first record")
    ap.add_argument("--minutes", type=float, nargs="+", default=[1, 2, 5, 10, 15, 30])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--opt-level", type=int, default=3)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--json", help="write the table's numbers here")
    args = ap.parse_args(argv)

    import kiln
    from bench_models import feeds_for
    from kiln.bench import Engine, alternate
    from kiln.feeds import with_fixed_dims
    from kiln.frontend.onnx import load_model
    from kiln.target import Target
    from kiln.tune import records as rec

    recs = rec.load(args.records)
    if not recs:
        raise SystemExit(f"{args.records}: no records")
    start = args.start if args.start is not None else min(r.timestamp for r in recs)
    model = with_fixed_dims(load_model(args.model), {}, print)
    mod, feeds, target = kiln.from_onnx(model), feeds_for(model), Target.host().key
    engines, rows = [], []
    for label, cut in checkpoints(recs, start, args.minutes):
        held = [r for r in recs if cut is None or r.timestamp <= cut]
        configs = rec.best_configs(held, target)
        sess = kiln.InferenceSession(kiln.build(mod, opt_level=args.opt_level, records=configs), threads=args.threads)
        engines.append(Engine(label, lambda s=sess: s.run(None, feeds)))
        trials = sum(1 for r in held if r.target == target) if label != "untuned" else 0
        rows.append({"checkpoint": label, "trials": trials, "applied": len(configs) if label != "untuned" else 0})
    for e in engines:
        e.run()
    alternate(engines, args.runs)
    final = float(np.median(engines[-1].times))
    print(f"{args.model}: {args.threads} thread(s), tuning started {start:.0f}, medians of {args.runs} runs")
    print(f"{'checkpoint':>10s} {'trials':>7s} {'configs':>8s} {'ms':>9s} {'vs final':>9s}")
    for row, e in zip(rows, engines):
        row["median_ms"] = float(np.median(e.times)) * 1e3
        row["vs_final"] = float(np.median(e.times)) / final
        print(f"{row['checkpoint']:>10s} {row['trials']:7d} {row['applied']:8d} {row['median_ms']:9.3f} "
              f"{row['vs_final']:8.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps({"model": args.model, "threads": args.threads, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
