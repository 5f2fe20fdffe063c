"""Kiln's GEMM against numpy's SGEMM (OpenBLAS) in one run: the two take turns (kiln.bench.alternate),
so a busy or throttling machine slows both alike; reports medians and bests, GFLOP/s, % of the FMA peak
and the Kiln / numpy ratio.

Turns, not call-by-call alternation: both libraries keep their worker threads spinning after a call,
and on a 2-core machine a call made while the other library's threads spin runs no faster on 2
threads than on 1 (Kiln 1024^3: 30.8 ms at 2 threads alternating call by call, 17.1 ms alone).
OpenBLAS's threads spin longer than the 100 ms a model benchmark's turn settles for: Kiln's
128x384x1536 ran at 72 GFLOP/s on 2 threads after 100 ms, 133 after 300 ms (SETTLE_S).

    .venv/bin/python scripts/bench_gemm.py                       # 1024^3, threads 1 and 2
    .venv/bin/python scripts/bench_gemm.py --shapes 1x784x1024 8x1024x1024 --trans-b

Each thread count runs in a child process whose OMP_NUM_THREADS / OPENBLAS_NUM_THREADS are set
before numpy and the kernels load. B is a constant (a weight), as in a model.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

SETTLE_S = 0.3  # untimed runs at the start of a turn: longer than OpenBLAS's threads spin after a call


def parse_shape(s: str) -> tuple[int, int, int]:
    m, k, n = (int(x) for x in s.lower().split("x"))
    return m, k, n


def _knob(kv: str) -> tuple[str, object]:
    name, value = kv.split("=", 1)
    return name, int(value) if value.lstrip("-").isdigit() else value


def child(args: argparse.Namespace) -> None:
    import numpy as np

    import kiln
    from kiln.bench import Engine, alternate
    from kiln.ir import Constant, Function, IRModule, TensorType, Var
    from kiln.op import get_op
    from kiln.topi.knobs import applying

    rng = np.random.default_rng(0)
    peak = args.peak or measured_peak(args.threads)
    for shape in args.shapes:
        m, k, n = parse_shape(shape)
        a = Var("a", TensorType((m, k), "float32"))
        w = rng.standard_normal((k, n)).astype(np.float32)
        if args.trans_b:
            body = get_op("linalg.gemm")(a, Constant(np.ascontiguousarray(w.T)), transB=1)
        else:
            body = get_op("linalg.mat_mul")(a, Constant(w))
        with applying(dict(_knob(kv) for kv in args.knob or [])):
            model = kiln.build(IRModule({"main": Function((a,), body)}), opt_level=args.opt_level)
        x = rng.standard_normal((m, k)).astype(np.float32)
        got = model.run({"a": x})[0]
        np.testing.assert_allclose(got, x @ w, rtol=1e-3, atol=1e-3 * np.sqrt(k))
        engines = [Engine("kiln", lambda model=model, x=x: model.run({"a": x})),
                   Engine("numpy", lambda x=x, w=w: x @ w)]
        alternate(engines, args.runs, burst=5, deadline_s=args.seconds, settle_s=SETTLE_S)
        times = {e.name: e.times for e in engines}
        runs = min(len(t) for t in times.values())
        flop = 2.0 * m * n * k
        med = {name: float(np.median(t)) for name, t in times.items()}
        best = {name: float(np.min(t)) for name, t in times.items()}
        cells = []
        for name in times:
            g, gb = flop / med[name] / 1e9, flop / best[name] / 1e9
            pct = f" ({100 * g / peak:.0f}% / {100 * gb / peak:.0f}% of peak)" if peak else ""
            cells.append(f"{name} {med[name] * 1e3:.3f} ms, {g:.1f} / best {gb:.1f} GF/s{pct}")
        knobs = f" {' '.join(args.knob)}" if args.knob else ""
        print(f"threads={args.threads} {m}x{k}x{n}{' transB' if args.trans_b else ''}{knobs} runs={runs}: "
              + " | ".join(cells) + f" | kiln/numpy speed: median {med['numpy'] / med['kiln']:.2f}x, "
              f"best {best['numpy'] / best['kiln']:.2f}x", flush=True)


def measured_peak(threads: int) -> float:
    """This machine's FP32 FMA peak at `threads` threads, measured now (scripts/machine_limits.py)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import machine_limits

    return machine_limits.fma_gflops(machine_limits.build(), threads, 50_000_000)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", nargs="+", default=["1024x1024x1024"], help="MxKxN products")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--trans-b", action="store_true", help="Gemm with transB=1 (B stored [N, K])")
    p.add_argument("--seconds", type=float, default=20.0, help="time budget per shape (default 20)")
    p.add_argument("--runs", type=int, default=100, help="timed runs of each engine (default 100)")
    p.add_argument("--opt-level", type=int, default=2)
    p.add_argument("--knob", action="append", metavar="NAME=VALUE", help="a schedule knob, e.g. dense.mr=4")
    p.add_argument("--peak", type=float, default=None, help="FMA peak in GFLOP/s (default: measured in this run)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        args.threads = args.threads[0]
        child(args)
        return
    for t in args.threads:
        env = dict(os.environ, OMP_NUM_THREADS=str(t), OPENBLAS_NUM_THREADS=str(t))
        argv = [a for a in sys.argv[1:]]
        if "--threads" in argv:
            i = argv.index("--threads")
            j = i + 1
            while j < len(argv) and not argv[j].startswith("--"):
                j += 1
            del argv[i:j]
        subprocess.run([sys.executable, __file__, *argv, "--threads", str(t), "--child"], env=env, check=True)


if __name__ == "__main__":
    main()
