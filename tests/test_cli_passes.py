"""--pass-config and --disable-pass on `kiln compile/run/show/bench`: they reach the graph passes, and a
misspelt name is a one-line error with status 2."""

from __future__ import annotations

import onnx
import pytest

from kiln.cli import main
from kiln.models import small_cnn


@pytest.fixture(scope="module")
def cnn_path(tmp_path_factory) -> str:
    p = tmp_path_factory.mktemp("m") / "cnn.onnx"
    onnx.save(small_cnn(), str(p))
    return str(p)


@pytest.mark.parametrize("command", [["compile", "-o", "{out}"], ["run"], ["show", "--passes"], ["bench", "--runs", "1"]])
@pytest.mark.parametrize("flags, needle", [
    (["--disable-pass", "fold-scale-axes"], "disabled pass 'fold-scale-axes' is not a pass; did you mean 'fold-scale-axis'?"),
    (["--pass-config", "pack_dense.mr=4"], "pass config key 'pack_dense.mr' is read by no pass; did you mean 'pack_dense.nr'?"),
    (["--pass-config", "pack_dense.nr"], "--pass-config 'pack_dense.nr' must look like NAME=VALUE"),
])
def test_a_misspelt_option_is_a_one_line_error(cnn_path, tmp_path, capsys, command, flags, needle):
    argv = [command[0], cnn_path, *[a.replace("{out}", str(tmp_path / "out")) for a in command[1:]], *flags]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err == f"kiln {command[0]}: error: {needle}\n" and captured.out == ""


@pytest.mark.parametrize("nr, weight", [(4, "Tensor[(3, 32, 4), float32]"), (5, "Tensor[(2, 32, 5), float32]")])
def test_pass_config_reaches_the_pass(cnn_path, capsys, nr, weight):
    assert main(["show", cnn_path, "--opt-level", "2", "--pass-config", f"pack_dense.nr={nr}"]) == 0
    assert weight in capsys.readouterr().out


def test_disable_pass_and_a_boolean_value(cnn_path, capsys):
    argv = ["show", cnn_path, "--passes", "--disable-pass", "pack-dense", "--disable-pass", "fold-scale-axis",
            "--pass-config", "alter_op_layout.pad_channels=false"]  # read as False: the pass rejects "false"
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "// IR after pack-dense" not in out and "// IR after fold-scale-axis" not in out
    assert "// IR after alter-op-layout" in out and "dense_packed" not in out


def test_run_compiles_with_pass_options_and_matches_the_interpreter(cnn_path, capsys):
    assert main(["run", cnn_path, "--dim", "N=2"]) == 0
    want = capsys.readouterr().out
    assert main(["run", cnn_path, "--dim", "N=2", "--disable-pass", "pack-dense"]) == 0
    got = capsys.readouterr().out
    assert got.split(" crc32")[0] == want.split(" crc32")[0]  # same shape, dtype and sum (float rounding aside)


def test_a_compiled_directory_takes_no_pass_options(cnn_path, tmp_path, capsys):
    out = tmp_path / "cnn"
    assert main(["compile", cnn_path, "-o", str(out), "--dim", "N=1", "--pass-config", "pack_dense.nr=4"]) == 0
    capsys.readouterr()
    assert main(["run", str(out), "--disable-pass", "pack-dense"]) == 2
    assert "apply when compiling" in capsys.readouterr().err
