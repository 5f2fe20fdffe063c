"""scripts/bench_wide.py: engines in their own processes taking turns, the table and its n/a cells."""

import importlib.util
import io
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _script():
    sys.path.insert(0, str(SCRIPTS))
    spec = importlib.util.spec_from_file_location("bench_wide", SCRIPTS / "bench_wide.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_wide"] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


class _FakeWorker:
    def __init__(self, name, log):
        self.engine, self.times, self.log = name, [], log

    def turn(self, runs):
        self.log.append((self.engine, runs))
        self.times += [0.001] * runs


def test_turns_alternate_until_every_engine_has_its_runs():
    bw, log = _script(), []
    workers = [_FakeWorker("a", log), _FakeWorker("b", log)]
    bw.take_turns(workers, runs=5, burst=2, deadline_s=60)
    assert log == [("a", 2), ("b", 2), ("a", 2), ("b", 2), ("a", 1), ("b", 1)]


class _FakeProc:
    def __init__(self, text):
        self.stdout, self.stdin = io.StringIO(text), io.StringIO()

    def send_signal(self, sig):
        pass

    def wait(self):
        return -9


def _worker(bw, text):
    w = bw.Worker.__new__(bw.Worker)
    w.engine, w.times, w.proc = "kiln", [], _FakeProc(text)
    return w


def test_a_worker_reply_skips_what_a_library_printed():
    bw = _script()
    w = _worker(bw, 'compiling 3 kernels\n{"times": [0.5, 0.25]}\n')
    w.turn(2)
    assert w.times == [0.5, 0.25]


def test_a_worker_that_dies_in_a_turn_names_its_engine():
    bw = _script()
    w = _worker(bw, "Segmentation fault\n")
    with pytest.raises(bw.WorkerDied, match="died during a turn") as err:
        w.turn(2)
    assert err.value.engine == "kiln"


def test_table_marks_an_engine_that_could_not_run():
    bw = _script()
    rows = [bw.Row("m1", "cnn", 1, 2, 1.0, median_ms={"kiln": 2.0, "onnxruntime": 4.0},
                   unavailable={"torch_eager": "NotImplementedError: no mapping for NonMaxSuppression"}),
            bw.Row("m2", "mlp", 1, 2, 0.5, median_ms={"kiln": 3.0, "onnxruntime": 1.5, "torch_eager": 3.0},
                   host_groups=1)]
    text = bw.markdown(rows, {"fma_peak_gflops_2t": 100.0})
    assert "| m1 | cnn | 1 | 2 | 2.000 | 4.000 | n/a | 0.50 | n/a | 500.0 | 500.0% |" in text
    assert "| m2 | mlp | 1 | 2 | 3.000 | 1.500 | 3.000 | 2.00 | 2.00 |" in text
    assert "batch 1, 2 threads: geomean kiln/ort 1.00, 1 of 2 above 1.0, worst m2 2.00" in text
    assert "- n/a: torch_eager on m1: NotImplementedError: no mapping for NonMaxSuppression" in text
    assert "- kiln runs 1 group(s) of m2 on the host" in text and "of m1 on the host" not in text


def test_a_second_kiln_engine_gets_its_columns_and_geomean():
    bw = _script()
    rows = [bw.Row("m", "mlp", 8, 1, 1.0, median_ms={"kiln": 2.0, "onnxruntime": 4.0, "kiln_pool": 1.0})]
    text = bw.markdown(rows, {"fma_peak_gflops_1t": 1000.0})
    assert text.splitlines()[0] == ("| model | family | batch | threads | kiln ms | ort ms | kiln_pool ms | kiln/ort "
                                    "| kiln_pool/ort | GFLOP/s | % peak |")
    assert "| m | mlp | 8 | 1 | 2.000 | 4.000 | 1.000 | 0.50 | 0.25 | 500.0 | 50.0% |" in text
    assert "batch 8, 1 threads: geomean kiln_pool/ort 0.25, 0 of 1 above 1.0, worst m 0.25" in text


def _run(*args, tmp_path):
    return subprocess.run([sys.executable, str(SCRIPTS / "bench_wide.py"), *args], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)


def test_a_tiny_run_times_each_engine_in_its_own_process(tmp_path):
    out = tmp_path / "wide.json"
    r = _run("--tiny", "--models", "mlp", "--engines", "kiln", "onnxruntime", "--batch", "1", "--threads", "1",
             "--runs", "3", "--burst", "2", "--json", str(out), "--markdown", str(tmp_path / "wide.md"),
             tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    (row,) = json.loads(out.read_text())["rows"]
    assert row["model"] == "mlp" and row["family"] == "mlp" and row["unavailable"] == {} and row["host_groups"] == 0
    assert set(row["median_ms"]) == {"kiln", "onnxruntime"} and all(v > 0 for v in row["median_ms"].values())
    assert row["max_diff_vs_ort"]["kiln"] < 1e-4 and math.isfinite(row["gflop"])
    assert "| mlp | mlp | 1 | 1 |" in (tmp_path / "wide.md").read_text()


def test_a_family_with_no_model_is_a_clear_error(tmp_path):
    r = _run("--families", "quantum", tmp_path=tmp_path)
    assert r.returncode == 2 and "no model of families ['quantum']" in r.stderr
