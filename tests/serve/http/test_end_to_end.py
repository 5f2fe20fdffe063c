"""`kiln serve` as a user runs it (the command, the real scheduler by name), through tritonclient.http:
RT and BE requests answered equal to the model's own run and counted in /metrics, then SIGTERM and exit 0. Skipped where this
Kiln has no kiln.serve.scheduler (it is built by another part of issue 28)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.request

import numpy as np
import pytest

from tests.serve.http.models import MLP_SIZES
from tests.serve.http.test_sigterm import ROOT, _wait_ready

pytestmark = pytest.mark.skipif(importlib.util.find_spec("kiln.serve.scheduler") is None,
                                reason="kiln.serve.scheduler (the request scheduler) is not in this Kiln")
httpclient = pytest.importorskip("tritonclient.http")


@pytest.mark.parametrize("scheduler", ["reef", "fifo"])
def test_kiln_serve_command_end_to_end(tmp_path, compiled, mlp_model, scheduler):
    shutil.copytree(compiled["mlp"], tmp_path / "rt_mlp")
    (tmp_path / "rt_mlp" / "config.json").write_text(json.dumps({"priority": "rt"}))
    shutil.copytree(compiled["mlp"], tmp_path / "be_mlp")
    proc = subprocess.Popen([sys.executable, "-m", "kiln", "serve", str(tmp_path), "--port", "0", "--scheduler",
                             scheduler], cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT},
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        port = int(re.search(r"http://127\.0\.0\.1:(\d+)", line).group(1))
        _wait_ready(port)
        client = httpclient.InferenceServerClient(url=f"127.0.0.1:{port}", concurrency=4)
        rng = np.random.default_rng(0)
        pending = []
        for i in range(24):
            x = rng.standard_normal((2, MLP_SIZES[0])).astype(np.float32)
            tensor = httpclient.InferInput("input", [2, MLP_SIZES[0]], "FP32")
            tensor.set_data_from_numpy(x, binary_data=True)
            model, priority = ("rt_mlp", 0) if i % 3 == 0 else ("be_mlp", 2)
            pending.append((x, client.async_infer(model, [tensor], priority=priority)))
        name = mlp_model.outputs[0].name
        for x, request in pending:
            np.testing.assert_array_equal(request.get_result().as_numpy(name), mlp_model.run({"input": x})[0])
        client.close()
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
        assert 'kiln_requests_total{model="rt_mlp"} 8\n' in metrics
        assert 'kiln_requests_total{model="be_mlp"} 16\n' in metrics
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, proc.stderr.read()
    finally:
        proc.kill()
