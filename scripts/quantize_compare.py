"""Kiln's quantizer beside ONNX Runtime's on the same model and calibration data: each one's error
against the float model (max abs error and cosine of the outputs, top-1 agreement) and the time it
took to quantize. Usage:

    .venv/bin/python scripts/quantize_compare.py mobilenet_v2 --calibrate 32 --tests 16
    .venv/bin/python scripts/quantize_compare.py resnet18 --calibrate DIR_OF_NPZ --methods minmax entropy
    .venv/bin/python scripts/quantize_compare.py bert --dynamic

MODEL is a built-in model (kiln.models) or an .onnx file; calibration is a number of random feeds or
a directory of .npz/.npy feeds (kiln/quantization/calibration_data.py), the test feeds random ones of
another seed. Both quantized files run in ONNX Runtime, so the numbers compare the quantizers, not
the runtimes (NOTE: on a CPU without VNNI ONNX Runtime's u8 x s8 kernels saturate, which costs both).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import warnings

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime import quantization as ortq

import kiln
from kiln.feeds import random_feeds, symbolic_dims
from kiln.quantization.calibration_data import calibration_feeds

TEST_SEED = 10_000  # test feeds' seeds start here, far from the random calibration feeds' (0, 1, ...)

BUILT_IN = {"mobilenet_v2": lambda: kiln.models.mobilenet_v2(batch=1),
            "resnet18": lambda: kiln.models.resnet18(batch=1), "small_cnn": lambda: kiln.models.small_cnn(batch=1),
            "bert": lambda: kiln.models.bert(batch=1, layers=2), "mlp": lambda: kiln.models.mlp(batch=1)}
ORT_METHODS = {"minmax": ortq.CalibrationMethod.MinMax, "percentile": ortq.CalibrationMethod.Percentile,
               "entropy": ortq.CalibrationMethod.Entropy}


class _Reader(ortq.CalibrationDataReader):
    def __init__(self, feeds: list[dict[str, np.ndarray]]):
        self.feeds = iter(feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self.feeds, None)


def _outputs(path: str, feeds: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return [sess.run(None, f)[0] for f in feeds]


def _error(reference: list[np.ndarray], got: list[np.ndarray]) -> str:
    a = np.concatenate([r.ravel() for r in reference]).astype(np.float64)
    b = np.concatenate([g.ravel() for g in got]).astype(np.float64)
    top1 = np.mean([r.reshape(r.shape[0], -1).argmax(-1)[0] == g.reshape(g.shape[0], -1).argmax(-1)[0]
                    for r, g in zip(reference, got)])
    return (f"max abs error {np.abs(a - b).max():9.4g}  cosine {a @ b / np.linalg.norm(a) / np.linalg.norm(b):.5f}"
            f"  top-1 agreement {top1:5.1%}")


def _kiln(path: str, out: str, calibrate: str, method: str) -> float:
    """Seconds Kiln's quantizer takes to write `out` (method "dynamic": dynamic quantization)."""
    t0 = time.perf_counter()
    dynamic = method == "dynamic"
    kiln.quantize(path, out, calibrate=None if dynamic else calibrate, method="minmax" if dynamic else method,
                  dynamic=dynamic)
    return time.perf_counter() - t0


def _onnxruntime(path: str, out: str, calib: list[dict[str, np.ndarray]], method: str) -> float:
    """Seconds ONNX Runtime's quantizer takes to write `out`, with the same options as Kiln's."""
    t0 = time.perf_counter()
    if method == "dynamic":
        ortq.quantize_dynamic(path, out, weight_type=ortq.QuantType.QInt8, per_channel=True)
    else:
        ortq.quantize_static(path, out, _Reader(list(calib)), quant_format=ortq.QuantFormat.QDQ, per_channel=True,
                             activation_type=ortq.QuantType.QUInt8, weight_type=ortq.QuantType.QInt8,
                             calibrate_method=ORT_METHODS[method])
    return time.perf_counter() - t0


def compare(path: str, calibrate: str, tests: int, methods: list[str], dynamic: bool, out: str) -> None:
    mod = kiln.from_onnx(path)
    calib = [f for _, f in calibration_feeds(calibrate, mod)]
    dims = dict.fromkeys(symbolic_dims(onnx.load(path)), 1)
    test_feeds = [random_feeds(mod, {}, dims, seed=TEST_SEED + i) for i in range(tests)]
    reference = _outputs(path, test_feeds)
    rows = []
    for method in (["dynamic"] if dynamic else methods):
        for name, run in (("kiln", _kiln), ("onnxruntime", _onnxruntime)):
            file = os.path.join(out, f"{name}_{method}.onnx")
            rows.append((f"{name} {method}", run(path, file, calibrate if name == "kiln" else calib, method), file))
    print(f"{os.path.basename(path)}: {len(calib)} calibration feeds, {len(test_feeds)} test feeds")
    for name, seconds, file in rows:
        print(f"  {name:24s} {seconds:7.2f} s  {_error(reference, _outputs(file, test_feeds))}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help=f"an .onnx file or one of {', '.join(BUILT_IN)}")
    p.add_argument("--calibrate", default="32", help="random feeds (a number) or a directory of feeds (default 32)")
    p.add_argument("--tests", type=int, default=16, help="random test feeds (default 16)")
    p.add_argument("--methods", nargs="+", default=["minmax", "percentile", "entropy"])
    p.add_argument("--dynamic", action="store_true", help="compare dynamic quantization instead")
    args = p.parse_args()
    warnings.simplefilter("ignore")  # "calibrating on random feeds": this script does so on purpose
    with tempfile.TemporaryDirectory() as out:
        path = args.model
        if args.model in BUILT_IN:
            path = os.path.join(out, f"{args.model}.onnx")
            onnx.save(BUILT_IN[args.model](), path)
        compare(path, args.calibrate, args.tests, args.methods, args.dynamic, out)


if __name__ == "__main__":
    main()
