"""Many mixed real-time and best-effort requests through the REEF scheduler in-process (issue 28's
"10,000 mixed RT/BE requests with preemption: 0 lost, every answer equal to a solo run's", without
the HTTP front end): BE clients keep a long model busy while RT requests for a short one arrive
(Poisson, fixed seed) and preempt it; every answer is compared bit for bit with a solo run of the same
feeds, and the script exits 1 if any request was lost, failed or answered differently.

    .venv/bin/python scripts/serve_soak.py --requests 10000 --rate 200 --json soak.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

import numpy as np

import kiln
from kiln.models import mlp
from kiln.serve.dispatch import InferRequest, ModelConfig, Priority
from kiln.serve.scheduler import ReefScheduler
from kiln.target import Target

FEEDS = 16  # distinct inputs per model, each with its solo answer


def _models() -> dict[str, object]:
    target = dataclasses.replace(Target.host(), threading="kiln")
    return {"rt": kiln.build(mlp(batch=4, sizes=(256, 512, 512, 16)), target=target),
            "be": kiln.build(mlp(seed=1, batch=128, sizes=(512, 2048, 2048, 64)), target=target)}


def soak(requests: int, rate: float, be_share: float, seed: int) -> dict[str, object]:
    """Send `requests` requests (a `be_share` of them BE, queued as they come) and check every answer."""
    models, rng = _models(), np.random.default_rng(seed)
    feeds = {n: [{t.name: rng.standard_normal(t.shape).astype(np.float32) for t in m.inputs} for _ in range(FEEDS)]
             for n, m in models.items()}
    solo = {n: [m.run(f)[0] for f in feeds[n]] for n, m in models.items()}
    sched = ReefScheduler()
    for n, m in models.items():
        sched.add(n, m, ModelConfig(priority=Priority.RT if n == "rt" else Priority.BE, queue_limit=requests))
    sent, t0 = [], time.perf_counter()
    for _ in range(requests):
        name = "be" if rng.random() < be_share else "rt"
        k = int(rng.integers(FEEDS))
        if name == "rt":
            time.sleep(rng.exponential(1.0 / rate))
        sent.append((name, k, sched.submit(InferRequest(name, feeds[name][k]))))
    wrong = failed = 0
    for name, k, f in sent:
        if f.exception(timeout=600) is not None:
            failed += 1
        elif not np.array_equal(next(iter(f.result().values())), solo[name][k]):
            wrong += 1
    sched.close()
    stats = sched.stats()
    lat = np.array(sched.preemption_latencies()) * 1e6
    return {"requests": requests, "answered": sum(s.requests for s in stats.values()), "failed": failed,
            "wrong": wrong, "seconds": time.perf_counter() - t0, "preemptions": int(stats["be"].preemptions),
            "preempt_p50_us": float(np.percentile(lat, 50)) if len(lat) else None,
            "preempt_p99_us": float(np.percentile(lat, 99)) if len(lat) else None}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=10_000)
    p.add_argument("--rate", type=float, default=200.0, help="RT requests per second (Poisson)")
    p.add_argument("--be-share", type=float, default=0.2, help="fraction of the requests that are BE")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args()
    result = soak(args.requests, args.rate, args.be_share, args.seed)
    print(json.dumps(result, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    ok = result["answered"] == args.requests and not result["failed"] and not result["wrong"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
