"""Issue 28's soak over the wire: `kiln serve` in its own process, many mixed real-time and best-effort
requests from the unmodified tritonclient.http client, then SIGTERM while the last ones are in flight.

A BE model (a long MLP) is kept busy by closed-loop clients while RT requests for a short one arrive
(Poisson, fixed seed) and preempt it. Every request is sent before the SIGTERM, the last `--tail` of
them still in flight when it lands; the server must drain: every request answered, every answer equal
bit for bit to a solo run of the same compiled directory in this process, and exit status 0. Prints
(and writes with --json) the counts, the server's preemptions from /metrics and the client-side
latencies; exits 1 if any request was lost, failed or answered differently.

    .venv/bin/python scripts/serve_soak_http.py --requests 10000 --json soak_http.json
"""

from __future__ import annotations

import argparse
import dataclasses
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

import kiln
from kiln.models import mlp
from kiln.target import Target

FEEDS = 16  # distinct inputs per model, each with its solo answer
ROOT = Path(__file__).resolve().parents[1]


def _repository(repo: Path) -> dict[str, kiln.InferenceSession]:
    """Compile the two models into `repo` (a config file each) and load them again for solo answers."""
    target = dataclasses.replace(Target.host(), threading="kiln")
    specs = {"rt": mlp(batch=4, sizes=(256, 512, 512, 16)), "be": mlp(seed=1, batch=128, sizes=(512, 2048, 2048, 64))}
    for name, model in specs.items():
        kiln.build(model, target=target).export(repo / name)
        (repo / name / "config.json").write_text(json.dumps({"priority": name, "queue_limit": 100_000}))
    return {name: kiln.load(repo / name) for name in specs}


def _start_server(repo: Path) -> tuple[subprocess.Popen, int]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "kiln", "serve", str(repo), "--port", "0"], cwd=ROOT, env=env,
                            stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()
    match = re.search(r"http://127\.0\.0\.1:(\d+)", line)
    if not match:
        proc.kill()
        raise SystemExit(f"kiln serve did not start: {line}{proc.stderr.read()}")
    port = int(match.group(1))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=5).status == 200:
                return proc, port
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("kiln serve did not become ready in 120 s")


@dataclasses.dataclass
class Tally:
    """What the clients saw; one lock, since client threads add to it."""

    answered: int = 0
    wrong: int = 0
    failed: list[str] = dataclasses.field(default_factory=list)
    latency_ms: dict[str, list[float]] = dataclasses.field(default_factory=lambda: {"rt": [], "be": []})
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def check(self, name: str, got: np.ndarray | None, want: np.ndarray, ms: float, error: str | None) -> None:
        with self.lock:
            if error is not None:
                self.failed.append(f"{name}: {error}")
                return
            self.answered += 1
            self.wrong += int(not np.array_equal(got, want))
            self.latency_ms[name].append(ms)


def _input(session: kiln.InferenceSession, x: np.ndarray) -> list[httpclient.InferInput]:
    meta = session.get_inputs()[0]
    tensor = httpclient.InferInput(meta.name, list(x.shape), "FP32")
    tensor.set_data_from_numpy(x, binary_data=True)
    return [tensor]


def _one(client: httpclient.InferenceServerClient, name: str, session: kiln.InferenceSession, x: np.ndarray,
         want: np.ndarray, tally: Tally) -> None:
    out_name = session.get_outputs()[0].name
    t0 = time.perf_counter()
    try:
        result = client.infer(name, _input(session, x), outputs=[httpclient.InferRequestedOutput(out_name)])
        tally.check(name, result.as_numpy(out_name), want, (time.perf_counter() - t0) * 1e3, None)
    except Exception as e:  # noqa: BLE001 - every failure is counted and printed, none may pass silently
        tally.check(name, None, want, 0.0, f"{type(e).__name__}: {e}")


def _tail_one(port: int, name: str, session: kiln.InferenceSession, x: np.ndarray, want: np.ndarray,
              written: threading.Barrier, tally: Tally) -> None:
    """One request sent with http.client on a connection the server already accepted, so that it is known to be
    on the wire (the barrier) before SIGTERM; the body is tritonclient's own encoding of the request. (A connection
    still in the listening socket's backlog when the server closes it is reset by the kernel: a client connecting
    during shutdown sees a refusal, which is not a lost request.)"""
    out_name = session.get_outputs()[0].name
    body, json_size = httpclient.InferenceServerClient.generate_request_body(
        _input(session, x), outputs=[httpclient.InferRequestedOutput(out_name)])
    headers = {"Content-Type": "application/octet-stream"}
    if json_size is not None:
        headers["Inference-Header-Content-Length"] = str(json_size)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("GET", "/v2/health/live")  # a keep-alive connection the server has accepted, as a client pool's
    conn.getresponse().read()
    t0 = time.perf_counter()
    try:
        conn.request("POST", f"/v2/models/{name}/infer", body=body, headers=headers)
    finally:
        written.wait()
    try:
        response = conn.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {data[:200]!r}")
        length = response.getheader("Inference-Header-Content-Length")
        result = httpclient.InferenceServerClient.parse_response_body(
            data, header_length=int(length) if length is not None else None)
        tally.check(name, result.as_numpy(out_name), want, (time.perf_counter() - t0) * 1e3, None)
    except Exception as e:  # noqa: BLE001 - every failure is counted and printed, none may pass silently
        tally.check(name, None, want, 0.0, f"{type(e).__name__}: {e}")
    finally:
        conn.close()


def soak(requests: int, rate: float, be_clients: int, tail: int, seed: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="kiln-soak-") as tmp:
        repo = Path(tmp)
        sessions = _repository(repo)
        rng = np.random.default_rng(seed)
        feeds = {n: [rng.standard_normal(s.get_inputs()[0].shape).astype(np.float32) for _ in range(FEEDS)]
                 for n, s in sessions.items()}
        solo = {n: [s.run(None, {s.get_inputs()[0].name: x})[0] for x in feeds[n]] for n, s in sessions.items()}
        proc, port = _start_server(repo)
        url = f"127.0.0.1:{port}"
        tally, issued, issue_lock, t0 = Tally(), [0], threading.Lock(), time.perf_counter()
        budget = requests - tail

        def take() -> bool:
            with issue_lock:
                if issued[0] >= budget:
                    return False
                issued[0] += 1
                return True

        def be_client(k: int) -> None:
            client, r = httpclient.InferenceServerClient(url=url), np.random.default_rng(seed + 1 + k)
            while take():
                i = int(r.integers(FEEDS))
                _one(client, "be", sessions["be"], feeds["be"][i], solo["be"][i], tally)
            client.close()

        def rt_client() -> None:
            client, r = httpclient.InferenceServerClient(url=url), np.random.default_rng(seed + 100)
            while True:
                time.sleep(r.exponential(1.0 / rate))
                if not take():
                    break
                i = int(r.integers(FEEDS))
                _one(client, "rt", sessions["rt"], feeds["rt"][i], solo["rt"][i], tally)
            client.close()

        threads = [threading.Thread(target=be_client, args=(k,)) for k in range(be_clients)]
        threads.append(threading.Thread(target=rt_client))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        metrics = urllib.request.urlopen(f"http://{url}/metrics", timeout=30).read().decode()
        # the tail: every request written to its socket before the signal, answered after it
        written = threading.Barrier(tail + 1)

        def tail_request(j: int) -> None:
            name = "rt" if j % 2 else "be"
            i = j % FEEDS
            _tail_one(port, name, sessions[name], feeds[name][i], solo[name][i], written, tally)

        tails = [threading.Thread(target=tail_request, args=(j,)) for j in range(tail)]
        for t in tails:
            t.start()
        written.wait()
        proc.send_signal(signal.SIGTERM)
        for t in tails:
            t.join()
        status = proc.wait(120)
        seconds = time.perf_counter() - t0
    preempted = re.search(r'kiln_preemptions_total\{model="be"\} (\d+)', metrics)
    lat = {n: np.array(v) for n, v in tally.latency_ms.items()}
    return {"requests": requests, "answered": tally.answered, "wrong": tally.wrong, "failed": len(tally.failed),
            "first_failures": tally.failed[:5], "server_exit": status, "seconds": seconds,
            "preemptions": int(preempted.group(1)) if preempted else None,
            **{f"{n}_ms_p50": float(np.percentile(v, 50)) for n, v in lat.items() if len(v)},
            **{f"{n}_ms_p99": float(np.percentile(v, 99)) for n, v in lat.items() if len(v)}}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=10_000)
    p.add_argument("--rate", type=float, default=200.0, help="RT requests per second (Poisson)")
    p.add_argument("--be-clients", type=int, default=2, help="closed-loop BE clients")
    p.add_argument("--tail", type=int, default=32, help="requests in flight when SIGTERM is sent")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args()
    if not 0 < args.tail < args.requests:
        p.error("--tail must be between 1 and --requests - 1")
    result = soak(args.requests, args.rate, args.be_clients, args.tail, args.seed)
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    ok = result["answered"] == args.requests and not result["failed"] and not result["wrong"]
    return 0 if ok and result["server_exit"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
