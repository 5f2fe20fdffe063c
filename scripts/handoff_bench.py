"""Where the time of a preemption goes in the server (issues 27/28): a BE client keeps a best-effort
model running in a ReefScheduler (closed loop), and an RT client submits a request every --gap-ms;
each preemption's times (kiln.serve.scheduler.PreemptTrace) are split into

    arrival -> cancel    the submitting thread's Python until the BE run's cancel is issued
    cancel -> stopped    the pool: the chunks in flight finish or reach a checkpoint (the pool's stamp)
    stopped -> returned  the BE lane's thread gets back into Python (the GIL)
    stopped -> RT start  the RT lane learns that the cores are free and starts the RT run
    arrival -> stopped   the preemption latency (goal p99 <= 100 us)
    arrival -> returned  the same measured where the BE lane sees it (what the scheduler reported before)

p50/p99 in microseconds. Every model is built for Kiln's pool (-threading=kiln).

    .venv/bin/python scripts/handoff_bench.py --be resnet18 --rt mlp --preemptions 300 --json out.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import threading
import time
from pathlib import Path

import numpy as np

MODELS = ("resnet18", "resnet50", "mobilenet_v2", "bert", "mlp")
SEGMENTS = {
    "arrival -> cancel": ("arrival", "cancelled"),
    "cancel -> stopped": ("cancelled", "stopped"),
    "stopped -> returned": ("stopped", "returned"),
    "stopped -> RT start": ("stopped", "rt_started"),
    "arrival -> stopped": ("arrival", "stopped"),
    "arrival -> returned": ("arrival", "returned"),
}


def build(name: str):
    """Model `name` at batch 1 built for Kiln's pool, and random feeds for it."""
    import kiln
    import kiln.models as M
    from kiln.serve.workloads import feeds_for
    from kiln.target import Target

    cm = kiln.build(getattr(M, name)(batch=1), target=dataclasses.replace(Target.host(), threading="kiln"))
    return cm, feeds_for(cm.inputs)


def measure(be: str, rt: str, preemptions: int, gap_s: float) -> list:
    """Run until `preemptions` RT requests preempted the BE run (or 20x as many were sent); the traces."""
    from kiln.serve.dispatch import InferRequest, ModelConfig, Priority
    from kiln.serve.scheduler import ReefScheduler

    (be_model, be_feeds), (rt_model, rt_feeds) = build(be), build(rt)
    sched = ReefScheduler()
    sched.add("be", be_model, ModelConfig())
    sched.add("rt", rt_model, ModelConfig(priority=Priority.RT))
    stop = threading.Event()

    def be_client() -> None:
        while not stop.is_set():
            sched.submit(InferRequest("be", be_feeds)).result()

    client = threading.Thread(target=be_client, daemon=True)
    client.start()
    try:
        time.sleep(0.2)
        for _ in range(20 * preemptions):
            if len(sched.preemption_traces()) >= preemptions:
                break
            time.sleep(gap_s * np.random.uniform(0.5, 1.5))  # not in step with the BE run
            sched.submit(InferRequest("rt", rt_feeds)).result()
    finally:
        stop.set()
        client.join()
        sched.close()
    return sched.preemption_traces()


def breakdown(traces: list) -> dict[str, dict[str, float]]:
    """p50/p99 microseconds of every segment over the traces that have both ends."""
    out = {}
    for name, (a, b) in SEGMENTS.items():
        us = [(getattr(t, b) - getattr(t, a)) * 1e6 for t in traces
              if getattr(t, a) is not None and getattr(t, b) is not None]
        out[name] = {"n": len(us), "p50_us": float(np.percentile(us, 50)) if us else float("nan"),
                     "p99_us": float(np.percentile(us, 99)) if us else float("nan")}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--be", default="resnet18", choices=MODELS)
    p.add_argument("--rt", default="mlp", choices=MODELS)
    p.add_argument("--preemptions", type=int, default=300)
    p.add_argument("--gap-ms", type=float, default=20.0, help="mean time between RT requests")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    traces = measure(args.be, args.rt, args.preemptions, args.gap_ms * 1e-3)
    rows = breakdown(traces)
    print(f"BE {args.be}, RT {args.rt}: {len(traces)} preemptions")
    for name, r in rows.items():
        print(f"  {name:22s} n={r['n']:5d}  p50 {r['p50_us']:8.1f} us  p99 {r['p99_us']:8.1f} us")
    if args.json:
        args.json.write_text(json.dumps({"be": args.be, "rt": args.rt, "segments": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
