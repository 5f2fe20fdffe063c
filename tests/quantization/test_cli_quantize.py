"""`kiln quantize` end to end: files in, a quantized model and a JSON report out; mistakes exit 2."""

import json

import numpy as np
import onnx
import pytest

from kiln.cli import main
from tests.quantization.models import cnn_logits, images, ort_run, write_npz_dir


def test_static_with_a_report(tmp_path, capsys):
    model = tmp_path / "cnn.onnx"
    onnx.save(cnn_logits(), model)
    calib = write_npz_dir(str(tmp_path / "calib"), "image", images(4))
    out, report = tmp_path / "cnn_int8.onnx", tmp_path / "report.json"
    assert main(["quantize", str(model), "-o", str(out), "--calibrate", calib, "--method", "percentile",
                 "--percentile", "99.9", "--per-tensor", "--report", str(report)]) == 0
    printed = capsys.readouterr().out
    assert "static (percentile) int8, per-tensor weights" in printed and "SQNR" in printed
    rows = json.loads(report.read_text())["tensors"]
    assert {r["name"] for r in rows} >= {"stem.relu", "logits"}
    x = images(1, seed=5)[0]
    assert np.isfinite(ort_run(str(out), {"image": x})[0]).all()


def test_dynamic(tmp_path, capsys):
    from kiln.models import bert_tiny

    model = tmp_path / "bert.onnx"
    onnx.save(bert_tiny(batch=1), model)
    assert main(["quantize", str(model), "-o", str(tmp_path / "q.onnx"), "--dynamic"]) == 0
    assert "12 DynamicQuantizeLinear, 12 MatMulInteger" in capsys.readouterr().out


def test_mistakes_exit_2_with_a_message(tmp_path, capsys):
    model = tmp_path / "cnn.onnx"
    onnx.save(cnn_logits(), model)
    assert main(["quantize", str(model), "-o", str(tmp_path / "q.onnx")]) == 2
    assert "needs calibration data" in capsys.readouterr().err
    (tmp_path / "calib").mkdir()
    np.savez(tmp_path / "calib" / "one.npz", img=np.zeros((1, 3, 32, 32), np.float32))
    assert main(["quantize", str(model), "-o", str(tmp_path / "q.onnx"), "--calibrate", str(tmp_path / "calib")]) == 2
    assert "one.npz: input(s) img are not the model's" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="2"):
        main(["quantize", str(model), "-o", str(tmp_path / "q.onnx"), "--calibrate", "2", "--method", "mean"])
    assert "invalid choice: 'mean'" in capsys.readouterr().err
    assert not (tmp_path / "q.onnx").exists()


def test_the_method_choices_are_the_observers():
    from kiln.cli import build_parser
    from kiln.quantization.observers import OBSERVER_METHODS

    sub = next(a for a in build_parser()._actions if a.dest == "command").choices["quantize"]
    assert tuple(next(a for a in sub._actions if a.dest == "method").choices) == OBSERVER_METHODS
