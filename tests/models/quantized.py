"""Quantized test models made by ONNX Runtime's quantizer from Kiln's float models (ORT is the tool that
writes them and the oracle that runs them; it is never in Kiln's execution path)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_dynamic, quantize_static
from onnxruntime.quantization.shape_inference import quant_pre_process


class _Batches(CalibrationDataReader):
    def __init__(self, feeds: list[dict[str, np.ndarray]]):
        self._it = iter(feeds)

    def get_next(self):
        return next(self._it, None)


def feeds(model: onnx.ModelProto, seed: int) -> dict[str, np.ndarray]:
    """Random float inputs for a model with static input shapes (int64 ids in [0, 100) for token inputs)."""
    rng = np.random.default_rng(seed)
    out = {}
    for i in model.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        if i.type.tensor_type.elem_type == onnx.TensorProto.INT64:
            out[i.name] = rng.integers(0, 100, shape).astype(np.int64)
        else:
            out[i.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def static_qdq(model: onnx.ModelProto, tmp: Path, name: str, fmt: QuantFormat = QuantFormat.QDQ) -> Path:
    """`model` pre-processed (batch norms folded), calibrated on four random batches, quantized with uint8
    activations and per-channel int8 weights."""
    src, pre, out = tmp / f"{name}.onnx", tmp / f"{name}_pre.onnx", tmp / f"{name}_int8.onnx"
    onnx.save(model, src)
    quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)  # static shapes: no sympy needed
    quantize_static(str(pre), str(out), _Batches([feeds(model, s) for s in range(4)]), quant_format=fmt,
                    per_channel=True)
    return out


def dynamic(model: onnx.ModelProto, tmp: Path, name: str) -> Path:
    """`model` with its matmul weights quantized to int8 and activations quantized at run time."""
    src, out = tmp / f"{name}.onnx", tmp / f"{name}_dyn.onnx"
    onnx.save(model, src)
    quantize_dynamic(str(src), str(out))
    return out
