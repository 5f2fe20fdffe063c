"""The `kiln` command: run, show, demo; user mistakes exit 2 with a message, not a traceback."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from kiln.cli import main
from kiln.models import small_cnn
from kiln.target import Target
from kiln.transform.layout import default_block


@pytest.fixture(scope="module")
def cnn_path(tmp_path_factory) -> str:
    p = tmp_path_factory.mktemp("m") / "cnn.onnx"
    onnx.save(small_cnn(), str(p))
    return str(p)


def test_run_random_inputs_with_symbolic_dim(cnn_path, capsys, tmp_path):
    assert main(["run", cnn_path, "--dim", "N=3", "--output-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "probs: shape=(3, 10) dtype=float32" in out and "crc32=" in out
    assert np.load(tmp_path / "probs.npy").shape == (3, 10)
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]


def test_run_with_input_file(cnn_path, capsys, tmp_path):
    x = np.zeros((1, 3, 32, 32), np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main(["run", cnn_path, "--input", f"image={tmp_path / 'x.npy'}"]) == 0
    assert "probs: shape=(1, 10)" in capsys.readouterr().out


@pytest.mark.parametrize("argv,needle", [
    (["run", "/nonexistent/model.onnx"], "no such file"),
    (["run", "{cnn}"], "--dim N="),
    (["run", "{cnn}", "--input", "nope=x.npy"], "model's inputs are image"),
    (["run", "{cnn}", "--dim", "N=x"], "non-negative integer"),
    (["show", "{cnn}", "--graph", "out.png"], ".svg or .html"),
])
def test_user_errors_exit_2_with_message(cnn_path, capsys, argv, needle):
    argv = [a.replace("{cnn}", cnn_path) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_wrong_input_shape_names_input(cnn_path, capsys, tmp_path):
    np.save(tmp_path / "bad.npy", np.zeros((1, 3, 31, 32), np.float32))
    assert main(["run", cnn_path, "--input", f"image={tmp_path / 'bad.npy'}"]) == 2
    assert "input 'image'" in capsys.readouterr().err


def test_show_text_stats_passes_and_graph(cnn_path, capsys, tmp_path):
    assert main(["show", cnn_path]) == 0
    assert "def @main(%image: Tensor[(N, 3, 32, 32), float32])" in capsys.readouterr().out
    assert main(["show", cnn_path, "--stats"]) == 0
    out = capsys.readouterr().out
    assert "nn.conv                          4" in out and "parameters: 41,192 bytes" in out
    assert main(["show", cnn_path, "--passes", "--opt-level", "3"]) == 0
    out = capsys.readouterr().out
    assert "// IR after fuse-ops" in out and "Primitive=1" in out and "total" in out
    for ext in ("svg", "html"):
        path = tmp_path / f"g.{ext}"
        assert main(["show", cnn_path, "--graph", str(path)]) == 0
        page = path.read_text()
        # the default opt_level keeps convs in the blocked layout: 16 channels are 2 blocks of 8 (AVX2) or
        # 1 block of 16 (AVX-512)
        blocked = f">(N, {16 // default_block(Target.host())}, 32, 32, {default_block(Target.host())}), float32<"
        assert "<svg" in page and "fused (" in page and blocked in page


def test_demo_runs(capsys):
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "parse(print(m)) == m: True" in out and "fused kernels" in out


def test_help_on_every_command(capsys):
    for cmd in ("run", "show", "demo"):
        with pytest.raises(SystemExit) as e:
            main([cmd, "--help"])
        assert e.value.code == 0
        assert "usage: kiln" in capsys.readouterr().out
