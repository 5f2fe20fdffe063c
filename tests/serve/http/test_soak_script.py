"""scripts/serve_soak_http.py, small: a real `kiln serve` process, mixed RT/BE requests from tritonclient.http,
SIGTERM with requests in flight; every request answered equal to a solo run, exit status 0."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tritonclient.http")
SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "serve_soak_http.py"


@pytest.mark.slow
def test_soak_over_http_loses_nothing_across_sigterm(tmp_path):
    out = tmp_path / "soak.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--requests", "120", "--tail", "16", "--json", str(out)],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(out.read_text())
    assert (result["answered"], result["wrong"], result["failed"], result["server_exit"]) == (120, 0, 0, 0)
