import onnx
import pytest

from kiln.cli import main
from kiln.tune import records as rec
from tests.tune.conftest import requires_gcc
from tests.tune.models import tiny_model


@pytest.fixture
def model_path(tmp_path):
    path = tmp_path / "tiny.onnx"
    onnx.save(tiny_model(), str(path))
    return str(path)


@requires_gcc
def test_kiln_tune_then_compile_run_and_bench_with_the_records(model_path, tmp_path, capsys):
    log = str(tmp_path / "log.jsonl")
    assert main(["tune", model_path, "--trials", "2", "--batch", "2", "--records", log, "--threads", "1",
                 "--timeout", "5", "--check-rounds", "2"]) == 0
    out = capsys.readouterr().out
    assert "2 tuning task(s)" in out and "overall" in out and "ETA" in out
    assert "estimated model latency" in out and "untuned" in out
    assert "in-model check" in out
    measured = [r for r in rec.load(log) if r.in_model is None]
    checks = [r for r in rec.load(log) if r.in_model is not None]
    assert len(measured) == 2 and len(checks) == len(rec.best_configs(measured))

    assert main(["compile", model_path, "-o", str(tmp_path / "built"), "--records", log]) == 0
    assert "tuned workload(s)" in capsys.readouterr().out
    assert main(["run", str(tmp_path / "built")]) == 0
    from_dir = capsys.readouterr().out

    assert main(["run", model_path, "--executor", "compiled"]) == 0
    untuned = capsys.readouterr().out
    assert main(["run", model_path, "--records", log]) == 0
    tuned = capsys.readouterr().out
    shapes = [ln.split(" sum=")[0] for ln in untuned.splitlines()]
    assert [ln.split(" sum=")[0] for ln in tuned.splitlines()] == shapes
    assert [ln.split(" sum=")[0] for ln in from_dir.splitlines()] == shapes

    assert main(["bench", model_path, "--records", log, "--runs", "1", "--warmup", "0"]) == 0
    assert "tuned" in capsys.readouterr().out


def test_records_errors_are_user_errors(model_path, tmp_path, capsys):
    assert main(["run", model_path, "--records", str(tmp_path / "missing.jsonl")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["tune", model_path, "--trials", "-1", "--records", str(tmp_path / "x.jsonl")]) == 2
    assert "--trials" in capsys.readouterr().err
    assert main(["tune", model_path, "--trials", "0", "--check-rounds", "0", "--records", str(tmp_path / "x.jsonl")]) == 2
    assert "nothing to do" in capsys.readouterr().err


def test_trials_0_only_checks_the_records_picks_in_the_model(model_path, tmp_path, capsys):
    log = str(tmp_path / "none.jsonl")
    assert main(["tune", model_path, "--trials", "0", "--check-rounds", "2", "--records", log]) == 0
    assert "nothing to check" in capsys.readouterr().out
