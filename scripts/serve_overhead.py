"""What `kiln serve` adds to a request on loopback: the MLP with binary tensors over one keep-alive
connection, against model.run on the same compiled model in this process (issue 28's goal: at most
0.5 ms more at p50).

    .venv/bin/python scripts/serve_overhead.py [--rounds 20] [--burst 50] [--scheduler reef|fifo]
                                               [--client raw|triton] [--batch 1] [--sizes 784,1024,1024,10]
                                               [--json OUT.json]

The server is `kiln serve` in its own process (as deployed), on a repository holding the MLP compiled
once here. The two ways take turns: each round times a burst of requests through the server, then a
burst of in-process runs, each burst after a few untimed calls so that the other way's spinning pool
threads have gone idle. Latencies are pooled per way; the report gives p50 and p99 of each and their
difference, plus the median over rounds of each round's p50 difference. `--client raw` (default) is
http.client with the binary tensor extension; `--client triton` is tritonclient.http (adds the
client library's own cost, which is not the server's).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import kiln
from kiln.models.mlp import mlp

ROOT = Path(__file__).resolve().parent.parent
WARMUP = 5


def raw_client(port: int, x: np.ndarray) -> Callable[[], np.ndarray]:
    """One keep-alive connection; binary input and output."""
    head = json.dumps({"inputs": [{"name": "input", "shape": list(x.shape), "datatype": "FP32",
                                   "parameters": {"binary_data_size": x.nbytes}}],
                       "parameters": {"binary_data_output": True}}).encode()
    body, headers = head + x.tobytes(), {"Inference-Header-Content-Length": str(len(head))}
    conn = http.client.HTTPConnection("127.0.0.1", port)

    def call() -> np.ndarray:
        conn.request("POST", "/v2/models/mlp/infer", body=body, headers=headers)
        response = conn.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"server answered {response.status}: {data[:300]!r}")
        split = int(response.getheader("Inference-Header-Content-Length"))
        return np.frombuffer(data[split:], np.float32)
    return call


def triton_client(port: int, x: np.ndarray) -> Callable[[], np.ndarray]:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(url=f"127.0.0.1:{port}")
    tensor = httpclient.InferInput("input", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x, binary_data=True)
    output = [httpclient.InferRequestedOutput(client.get_model_metadata("mlp")["outputs"][0]["name"],
                                              binary_data=True)]
    return lambda: client.infer("mlp", [tensor], outputs=output).as_numpy(output[0].name())


def start_server(repo: Path, scheduler: str) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-m", "kiln", "serve", str(repo), "--port", "0", "--scheduler", scheduler],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()
    match = re.search(r"http://127\.0\.0\.1:(\d+)", line)
    if not match:
        raise SystemExit(f"kiln serve did not start: {line}{proc.stderr.read()}")
    port = int(match.group(1))
    for _ in range(600):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/v2/models/mlp/ready")
            if conn.getresponse().status == 200:
                return proc, port
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit("the mlp never became ready")


def timed(fn: Callable[[], object], n: int) -> list[float]:
    for _ in range(WARMUP):
        fn()
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q)) * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--burst", type=int, default=50, help="requests per way per round")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--sizes", default="784,1024,1024,10", help="the MLP's layer widths (default 784,1024,1024,10)")
    p.add_argument("--scheduler", choices=("reef", "fifo"), default="reef")
    p.add_argument("--client", choices=("raw", "triton"), default="raw")
    p.add_argument("--json", metavar="OUT.json", help="also write the numbers as JSON")
    args = p.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        sizes = tuple(int(n) for n in args.sizes.split(","))
        model = kiln.build(mlp(batch=args.batch, sizes=sizes), target="c -threading=kiln")
        model.export(repo / "mlp")
        model = kiln.load(repo / "mlp").model
        x = np.random.default_rng(0).standard_normal((args.batch, sizes[0])).astype(np.float32)
        proc, port = start_server(repo, args.scheduler)
        try:
            remote = (raw_client if args.client == "raw" else triton_client)(port, x)
            np.testing.assert_array_equal(remote().reshape(-1), model.run({"input": x})[0].reshape(-1))
            served, local, diffs = [], [], []
            for _ in range(args.rounds):
                s = timed(remote, args.burst)
                i = timed(lambda: model.run({"input": x}), args.burst)
                served += s
                local += i
                diffs.append(pct(s, 50) - pct(i, 50))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    report = {"client": args.client, "scheduler": args.scheduler, "batch": args.batch,
              "requests_per_way": len(served),
              "served_ms": {"p50": pct(served, 50), "p99": pct(served, 99)},
              "in_process_ms": {"p50": pct(local, 50), "p99": pct(local, 99)},
              "overhead_ms": {"p50": pct(served, 50) - pct(local, 50), "p99": pct(served, 99) - pct(local, 99),
                              "median_of_round_p50s": statistics.median(diffs)}}
    print(f"{'':<12}{'p50 ms':>10}{'p99 ms':>10}")
    for label, key in (("kiln serve", "served_ms"), ("in-process", "in_process_ms"), ("overhead", "overhead_ms")):
        print(f"{label:<12}{report[key]['p50']:>10.3f}{report[key]['p99']:>10.3f}")
    print(f"overhead p50, median over {args.rounds} rounds: {report['overhead_ms']['median_of_round_p50s']:.3f} ms "
          "(goal <= 0.5)")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
