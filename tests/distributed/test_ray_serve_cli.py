"""`kiln serve REPO --ray local` as a user runs it: its own process and Ray cluster, tritonclient.http
answers equal the model's run, and SIGTERM ends it with status 0."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln.serve.repository import SERVE_TARGET
from tests.serve.http.models import MLP_SIZES, tiny_mlp

httpclient = pytest.importorskip("tritonclient.http")

pytestmark = pytest.mark.ray
ROOT = str(Path(__file__).resolve().parents[2])


def _start(repo: Path) -> tuple[subprocess.Popen, int]:
    """The server, once it printed its port (Ray's own start-up lines come first)."""
    proc = subprocess.Popen([sys.executable, "-m", "kiln.cli", "--cores", "1", "serve", str(repo), "--port", "0",
                             "--ray", "local"], cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen = []
    for line in proc.stderr:
        seen.append(line)
        match = re.search(r"kiln serve: .* on http://127\.0\.0\.1:(\d+) \(scheduler reef, on Ray\)", line)
        if match:  # the rest is read on, so that a full pipe never blocks the server's logging
            threading.Thread(target=seen.extend, args=(proc.stderr,), daemon=True).start()
            return proc, int(match.group(1))
    proc.kill()
    raise AssertionError("the server printed no address:\n" + "".join(seen))


def test_kiln_serve_ray_answers_and_exits_0_on_sigterm(tmp_path):
    pytest.importorskip("ray")
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    model = kiln.build(tiny_mlp(), target=SERVE_TARGET)
    model.export(tmp_path / "mlp")
    (tmp_path / "mlp" / "config.json").write_text(json.dumps({"replicas": 1}))
    proc, port = _start(tmp_path)
    try:
        client = httpclient.InferenceServerClient(url=f"127.0.0.1:{port}")
        _wait_ready(client)
        x = np.random.default_rng(0).standard_normal((2, MLP_SIZES[0])).astype(np.float32)
        tensor = httpclient.InferInput("input", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        name = model.outputs[0].name
        np.testing.assert_array_equal(client.infer("mlp", [tensor]).as_numpy(name), model.run({"input": x})[0])
        client.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        proc.kill()


def _wait_ready(client) -> None:
    """Until /v2/health/ready says yes (the port is bound before uvicorn listens: refused until then)."""
    deadline = time.monotonic() + 120
    while True:
        try:
            if client.is_server_ready():
                return
        except OSError:
            pass
        assert time.monotonic() < deadline, "the server never became ready"
        time.sleep(0.2)
