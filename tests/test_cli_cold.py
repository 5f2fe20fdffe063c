"""`kiln compile --profile`, `kiln show DIR`'s saved profile, and `kiln run --executor compiled` answering
from the generic tier (-v says so) or, with --wait, from the compiled kernels: the same outputs."""

from __future__ import annotations

import onnx
import pytest

from kiln.cli import main
from kiln.models import mlp


@pytest.fixture(scope="module")
def mlp_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "mlp.onnx"
    onnx.save(mlp(batch=1), str(path))
    return str(path)


def test_compile_profile_is_printed_saved_and_shown(mlp_path, tmp_path, capsys):
    out = tmp_path / "mlp"
    assert main(["compile", mlp_path, "-o", str(out), "--profile"]) == 0
    text = capsys.readouterr().out
    for part in ("build profile:", "  lower ", "  codegen ", "  compile ", "translation units: 1", "kiln_body_fused_"):
        assert part in text
    assert main(["show", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "build profile (as saved by the build):" in shown and "kiln_body_fused_" in shown


def _output_sum(text: str) -> float:
    """The printed sum of the MLP's output (`fc2: shape=... sum=S crc32=...`)."""
    line = next(line for line in text.splitlines() if line.startswith("fc2: shape=(1, 10)"))
    return float(line.split(" sum=")[1].split()[0])


def test_run_compiled_answers_from_the_generic_tier_then_wait_from_the_kernels(mlp_path, capsys):
    assert main(["run", mlp_path, "--executor", "compiled", "-v"]) == 0
    captured = capsys.readouterr()
    assert "session: tier generic" in captured.err and "answered by the generic tier" in captured.err
    generic = _output_sum(captured.out)
    assert main(["run", mlp_path, "--executor", "compiled", "--wait"]) == 0
    assert _output_sum(capsys.readouterr().out) == pytest.approx(generic, rel=1e-4)
    assert main(["run", mlp_path]) == 0  # the interpreter
    assert _output_sum(capsys.readouterr().out) == pytest.approx(generic, rel=1e-4)
