"""`kiln compile`, `kiln run DIR`, `kiln bench` on the built-in CNN (tiny run counts)."""

from __future__ import annotations

import dataclasses
import os

import onnx
import pytest

from kiln.cli import main
from kiln.models import small_cnn


@pytest.fixture(scope="module")
def cnn_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "cnn.onnx"
    onnx.save(small_cnn(), str(path))
    return str(path)


def test_compile_reports_stages_then_run_loads_the_directory(cnn_path, tmp_path, capsys):
    out = tmp_path / "cnn"
    assert main(["compile", cnn_path, "-o", str(out), "--dim", "N=1"]) == 0
    text = capsys.readouterr().out
    for stage in ("import", "passes", "lower", "compile", "export"):
        assert f"  {stage} " in text
    assert "aot executor" in text and sorted(os.listdir(out)) == ["kiln_pool.so", "model.json", "model.so", "weights.npz"]
    assert main(["compile", cnn_path, "-o", str(out), "--dim", "N=1"]) == 0
    assert "from the compile cache" in capsys.readouterr().out
    assert main(["run", str(out), "--output-dir", str(tmp_path / "outs")]) == 0
    assert "probs: shape=(1, 10) dtype=float32 sum=1" in capsys.readouterr().out
    assert os.listdir(tmp_path / "outs") == ["probs.npy"]


def test_compile_for_a_target_string_then_show_prints_it(cnn_path, tmp_path, capsys):
    """`--target` takes a partial string (the rest is the host's); `kiln show DIR` prints the artifact's target
    and notes the core count that differs from this machine's."""
    from kiln.target import Target

    cores = Target.host().cores + 1
    out = tmp_path / "cnn"
    assert main(["compile", cnn_path, "-o", str(out), "--dim", "N=1", "--target", f"c -cores={cores}"]) == 0
    assert f"-cores={cores} " in capsys.readouterr().out
    assert main(["show", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"target: {dataclasses.replace(Target.host(), cores=cores)}" in text
    assert f"host:   {Target.host()}" in text and f"built for {cores} cores" in text
    assert main(["compile", cnn_path, "-o", str(tmp_path / "x"), "--target", "c -frobnicate=1"]) == 2
    assert "unknown target option '-frobnicate=1'" in capsys.readouterr().err


def test_compile_keeps_symbolic_dims_and_lists_host_groups(cnn_path, tmp_path, capsys):
    out = tmp_path / "dyn"
    assert main(["compile", cnn_path, "-o", str(out), "--executor", "graph"]) == 0
    assert "graph executor" in capsys.readouterr().out
    assert main(["run", str(out), "--dim", "N=3"]) == 0
    assert "probs: shape=(3, 10)" in capsys.readouterr().out


def test_run_an_onnx_file_compiled(cnn_path, capsys):
    assert main(["run", cnn_path, "--dim", "N=2", "--executor", "compiled"]) == 0
    assert "probs: shape=(2, 10) dtype=float32 sum=2" in capsys.readouterr().out


def test_bench_prints_every_engine(cnn_path, capsys):
    assert main(["bench", cnn_path, "--runs", "2", "--warmup", "0", "--threads", "1"]) == 0
    text = capsys.readouterr().out
    assert "symbolic dim N = 1" in text and "0.0127 GFLOP per run" in text
    for engine in ("kiln (aot)", "interpreter") + (("onnxruntime",) if _has_ort() else ()):
        assert engine in text


def _has_ort() -> bool:
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.parametrize("argv, needle", [
    (["compile", "missing.onnx", "-o", "out"], "missing.onnx"),
    (["compile", "{model}", "-o", "{tmp}/x", "--dim", "B=1"], "no symbolic dim named B"),
    (["run", "{tmp}"], "no model.json"),
    (["bench", "{model}", "--runs", "0"], "--runs and --burst must be >= 1"),
])
def test_user_errors_exit_2(cnn_path, tmp_path, capsys, argv, needle):
    argv = [a.format(model=cnn_path, tmp=tmp_path) for a in argv]
    assert main(argv) == 2
    assert needle in capsys.readouterr().err
