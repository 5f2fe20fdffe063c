"""Kiln's quantizer against ONNX Runtime's quantize_static on the same model and calibration data:
similar accuracy against the float model; and Kiln compiles the file it writes."""

import numpy as np
import onnx
import pytest
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

import kiln
from tests.quantization.models import cnn_logits, images, ort_run, small_mlp, write_npz_dir


class Feeds(CalibrationDataReader):
    def __init__(self, feeds):
        self.feeds = iter(feeds)

    def get_next(self):
        return next(self.feeds, None)


def error_against_float(float_model, quantized, tests):
    return max(np.abs(ort_run(float_model, t)[0] - ort_run(quantized, t)[0]).max() for t in tests)


def test_accuracy_like_onnx_runtime_quantize_static(tmp_path):
    model = cnn_logits()
    path = str(tmp_path / "cnn.onnx")
    onnx.save(model, path)
    calib = images(16)
    quantize_static(path, str(tmp_path / "ort.onnx"), Feeds([{"image": x} for x in calib]),
                    quant_format=QuantFormat.QDQ, per_channel=True, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8)
    ours = kiln.quantize(path, calibrate=write_npz_dir(str(tmp_path / "calib"), "image", calib)).model
    tests = [{"image": x} for x in images(5, seed=7)]
    theirs_error = error_against_float(model, str(tmp_path / "ort.onnx"), tests)
    ours_error = error_against_float(model, ours, tests)
    assert ours_error < 1.5 * theirs_error


@pytest.mark.parametrize("dynamic", [False, True])
def test_kiln_compiles_the_quantized_file(tmp_path, dynamic):
    model = small_mlp()
    q = kiln.quantize(model, calibrate=write_npz_dir(str(tmp_path), "input", [
        np.random.default_rng(i).standard_normal((1, 64)).astype(np.float32) for i in range(8)]), dynamic=dynamic)
    x = {"input": np.random.default_rng(99).standard_normal((1, 64)).astype(np.float32)}
    compiled = kiln.build(kiln.from_onnx(q.model)).run(x)[0]
    np.testing.assert_allclose(compiled, kiln.evaluate(kiln.from_onnx(q.model), x)[0], rtol=1e-4, atol=1e-4)
