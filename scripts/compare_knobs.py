"""Per-kernel times of one model built under several schedule-knob configs, measured in one process
with the configs taking turns (a shared, noisy machine drifts; alternating keeps the comparison fair).

    .venv/bin/python scripts/compare_knobs.py mobilenet_v2 --threads 2 --rounds 30 \
        --config base='{}' --config rows='{"conv.rows_outer": true}'

Each round runs every config's `kiln_model_profile` once (times read in C around each kernel call);
the table shows each kernel's median per config and the ratio to the first config, then the whole model.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    import kiln
    from bench_models import EXTRA, MODELS, feeds_for
    from kiln.codegen import openmp_env
    from kiln.codegen.cache import CompileCache
    from kiln.compiler.aot import build_aot
    from kiln.compiler.flop_count import flop_count
    from kiln.ir.module import IRModule
    from kiln.runtime.executor import primitive_functions
    from kiln.topi.knobs import applying
    from profile_model import load

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", help=f"one of {', '.join(MODELS + EXTRA)}, or an .onnx file")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--stat", choices=("median", "min", "p10"), default="median",
                   help="per kernel over rounds: min or p10 estimate a quiet machine's time on a shared one")
    p.add_argument("--config", action="append", default=[], help="NAME=JSON knob config (the first is the base)")
    args = p.parse_args()
    configs = [(c.split("=", 1)[0], json.loads(c.split("=", 1)[1])) for c in args.config] or [("base", {})]
    model = load(args.model, 1)
    feeds = feeds_for(model)
    mods = []
    for _, cfg in configs:
        with applying(cfg):
            mods.append(build_aot(kiln.from_onnx(model), opt_level=3, cache=CompileCache(tempfile.mkdtemp())))
    ref = mods[0].run(feeds)
    for m in mods[1:]:
        for a, b in zip(ref, m.run(feeds)):
            np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3)
    for m in mods:
        fn = openmp_env.set_num_threads(m.library)
        if fn is not None:
            fn(ctypes.c_int(args.threads))
        for _ in range(3):
            m.run(feeds)
    times: list[dict[str, list[float]]] = [{} for _ in mods]  # per config: kernel -> per-round sums
    for _ in range(args.rounds):
        for k, m in enumerate(mods):
            per: dict[str, float] = {}
            for name, t in m.profile(feeds, 1):
                per[name] = per.get(name, 0.0) + t
            for name, t in per.items():
                times[k].setdefault(name, []).append(t)
    desc, flops = {}, {}
    for n, fn in enumerate(primitive_functions(mods[0].mod)):
        desc[f"fused_{n}"] = _describe(fn)
        flops[f"fused_{n}"] = flop_count(IRModule({"main": fn}))
    stat = {"median": np.median, "min": np.min, "p10": lambda a: np.percentile(a, 10)}[args.stat]
    med = [{name: float(stat(ts)) for name, ts in t.items()} for t in times]
    totals = [sum(m.values()) for m in med]
    calls: dict[str, int] = {}
    for name, _ in mods[0].profile(feeds, 1):
        calls[name] = calls.get(name, 0) + 1
    names = " ".join(f"{n:>9s}" for n, _ in configs)
    print(f"{args.model} threads {args.threads}, {args.rounds} rounds; {args.stat} per kernel in us "
          f"(total: their sum); ratios to {configs[0][0]}")
    print(f"{'kernel':10s} {names}  ratios   GFLOP/s(base)  ops")
    for name in sorted(med[0], key=lambda n: -med[0][n])[:args.top]:
        ts = [m.get(name, float("nan")) for m in med]
        ratios = " ".join(f"{t / ts[0]:.2f}" for t in ts[1:])
        gf = flops.get(name, 0) * calls.get(name, 1) / ts[0] / 1e9
        times_us = " ".join(f"{t * 1e6:9.1f}" for t in ts)
        print(f"{name:10s} {times_us}  {ratios:6s}  {gf:6.1f}  {desc.get(name, '')}")
    print("total      " + " ".join(f"{t * 1e6:9.1f}" for t in totals) + "  "
          + " ".join(f"{t / totals[0]:.3f}" for t in totals[1:]))


def _describe(fn) -> str:
    from kiln.ir.expr import Call, Op
    from kiln.ir.visitor import post_order

    calls = [e for e in post_order(fn.body) if isinstance(e, Call) and isinstance(e.op, Op)]
    ops = [e.op.name.split(".")[-1] for e in calls]
    shape = getattr(calls[-1].type, "shape", None) if calls else None
    args = [list(a.type.shape) if hasattr(a.type, "shape") else "tuple" for a in calls[0].args[:2]] if calls else []
    return f"{' > '.join(ops)} {args} -> {list(shape) if shape is not None else '?'}"


if __name__ == "__main__":
    main()
