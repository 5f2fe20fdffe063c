"""Shared by the model tests: the model variants they run, random inputs, ONNX Runtime's outputs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from kiln import models

RTOL, ATOL = 1e-4, 1e-5

SMALL = {  # name -> (builder, batch): reduced image sizes keep the interpreter fast
    "mlp": (lambda b: models.mlp(batch=b), 2),
    "resnet18": (lambda b: models.resnet18(batch=b, size=32), 1),
    "resnet50": (lambda b: models.resnet50(batch=b, size=32), 1),
    "mobilenet_v2": (lambda b: models.mobilenet_v2(batch=b, size=64), 2),
    "bert_tiny": (lambda b: models.bert_tiny(batch=b), 2),
    "small_cnn": (lambda b: models.small_cnn(batch=b), 2),
    "efficientnet_b0": (lambda b: models.efficientnet_b0(batch=b, size=64), 1),
    "gpt_tiny": (lambda b: models.gpt_tiny(batch=b), 2),
}
FULL_INTERPRETED = {
    "resnet18": lambda: models.resnet18(batch=1),
    "resnet50": lambda: models.resnet50(batch=1),
    "mobilenet_v2": lambda: models.mobilenet_v2(batch=1),
    "bert": lambda: models.bert(batch=1),
    "efficientnet_b0": lambda: models.efficientnet_b0(batch=1),
    "gpt": lambda: models.gpt(batch=1),
}


def feeds_for(model: onnx.ModelProto, batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs for a built-in model (token ids below the vocabulary size for BERT)."""
    rng = np.random.default_rng(seed)
    out = {}
    for vi in model.graph.input:
        dims = vi.type.tensor_type.shape.dim
        shape = tuple(d.dim_value if d.HasField("dim_value") else batch for d in dims)
        if vi.type.tensor_type.elem_type == onnx.TensorProto.INT64:  # token ids
            vocab = next(t.dims[0] for t in model.graph.initializer if t.name == "embeddings.word")
            out[vi.name] = rng.integers(0, vocab, shape).astype(np.int64)
        else:
            out[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def onnxruntime_outputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)
