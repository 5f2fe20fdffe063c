"""Small float models and calibration data for the quantizer's tests."""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort

from kiln.models import mlp, small_cnn


def cnn_logits() -> onnx.ModelProto:
    """The built-in small CNN (conv-bn-relu, residual add, max-pool, global pool, gemm) up to its logits:
    the softmax squashes differences, so the tests compare logits."""
    model = small_cnn(batch=1)
    assert model.graph.node[-1].op_type == "Softmax"
    del model.graph.node[-1]
    model.graph.output[0].name = "logits"
    onnx.checker.check_model(model)
    return model


def small_mlp() -> onnx.ModelProto:
    return mlp(batch=1, sizes=(64, 128, 128, 10))


def images(count: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((1, 3, 32, 32)).astype(np.float32) for _ in range(count)]


def write_npz_dir(directory: str, name: str, arrays: list[np.ndarray]) -> str:
    os.makedirs(directory, exist_ok=True)
    for i, a in enumerate(arrays):
        np.savez(os.path.join(directory, f"feed{i:03d}.npz"), **{name: a})
    return directory


def ort_run(model: onnx.ModelProto | str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    source = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(source, providers=["CPUExecutionProvider"]).run(None, feeds)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
