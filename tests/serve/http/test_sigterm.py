"""SIGTERM on a server process with requests in flight: every one is answered, then it exits 0."""

from __future__ import annotations

import http.client
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np

from tests.serve.http.test_malformed import GOOD, _infer

ROOT = str(Path(__file__).resolve().parents[3])


def _start(repo) -> tuple[subprocess.Popen, int]:
    env = {**os.environ, "PYTHONPATH": ROOT}
    proc = subprocess.Popen([sys.executable, "-m", "tests.serve.http.slow_server", str(repo), "0.3"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()
    match = re.search(r"http://127\.0\.0\.1:(\d+)", line)
    assert match, line + proc.stderr.read()
    return proc, int(match.group(1))


def _wait_ready(port: int) -> None:
    import time

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/v2/health/ready")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise TimeoutError("the server never became ready")


def test_sigterm_answers_every_request_in_flight_then_exits_0(tmp_path, compiled, mlp_model):
    shutil.copytree(compiled["mlp"], tmp_path / "mlp")
    proc, port = _start(tmp_path)
    try:
        _wait_ready(port)
        results: list = []

        def one() -> None:
            results.append(_infer(http.client.HTTPConnection("127.0.0.1", port, timeout=60), GOOD))
        threads = [threading.Thread(target=one) for _ in range(6)]
        for t in threads:
            t.start()
        for _ in threads:
            assert proc.stdout.readline().strip() == "queued"
        proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(60)
        assert proc.wait(60) == 0, proc.stderr.read()
    finally:
        proc.kill()
    expect = mlp_model.run({"input": np.array(GOOD["inputs"][0]["data"], np.float32).reshape(2, 8)})[0]
    assert [status for status, _ in results] == [200] * 6
    for _, doc in results:
        np.testing.assert_array_equal(np.array(doc["outputs"][0]["data"], np.float32).reshape(2, 4), expect)
