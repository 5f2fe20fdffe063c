"""1-D audio convolutions: a wav2vec 2.0-style feature encoder (strided Conv1d stack on the raw
waveform, GroupNorm with one group per channel as InstanceNormalization, GELU, a projection) and a
temporal convolutional network (causal dilated Conv1d residual blocks, left padding with Pad)."""

from __future__ import annotations

import numpy as np
import onnx

from kiln.models.bert import gelu, layer_norm, linear
from kiln.models.layers import conv, tensor
from kiln.models.onnx_builder import GraphBuilder

FEATURE_LAYERS = ((10, 5),) + ((3, 2),) * 4 + ((2, 2),) * 2  # (kernel, stride) of wav2vec 2.0's encoder


def wav2vec_features(seed: int = 0, batch: int | str = 1, samples: int = 16000, channels: int = 256,
                     hidden: int = 384) -> onnx.ModelProto:
    """waveform [batch, samples] -> features [batch, frames, hidden]."""
    g = GraphBuilder(seed)
    x = g.node("Unsqueeze", ["waveform", g.const("channel_axis", np.array([1], np.int64))], "waveform.1ch")
    c, frames = 1, samples
    for i, (k, s) in enumerate(FEATURE_LAYERS):
        x = conv(g, x, c, channels, k, f"conv{i}", s, bias=False, spatial=1, pad=0)
        if i == 0:
            x = g.node("InstanceNormalization", [x, g.uniform("norm0.scale", (channels,), 0.8, 1.2),
                                                 g.weight("norm0.bias", (channels,), 0.1)], "norm0")
        x, c, frames = gelu(g, x, f"conv{i}.gelu"), channels, (frames - k) // s + 1
    x = layer_norm(g, g.node("Transpose", [x], "frames", perm=[0, 2, 1]), channels, "norm")
    linear(g, x, channels, hidden, "features")
    return g.model("kiln_wav2vec_features", [tensor("waveform", [batch, samples])],
                   [tensor("features", [batch, frames, hidden])])


def _causal_conv(g: GraphBuilder, x: str, channels: int, k: int, dilation: int, name: str) -> str:
    pads = g.const(f"{name}.pads", np.array([0, 0, dilation * (k - 1), 0, 0, 0], np.int64))
    y = g.node("Pad", [x, pads], f"{name}.pad")
    return g.node("Relu", [conv(g, y, channels, channels, k, name, spatial=1, dilation=dilation, pad=0)],
                  f"{name}.relu")


def tcn(seed: int = 0, batch: int | str = 1, seq: int = 512, features: int = 64, channels: int = 128,
        dilations: tuple[int, ...] = (1, 2, 4, 8, 16, 32), k: int = 3, classes: int = 16) -> onnx.ModelProto:
    """signal [batch, features, seq] -> per-step logits [batch, classes, seq]."""
    g = GraphBuilder(seed)
    x = conv(g, "signal", features, channels, 1, "input", spatial=1)
    for i, d in enumerate(dilations):
        y = _causal_conv(g, _causal_conv(g, x, channels, k, d, f"block{i}.1"), channels, k, d, f"block{i}.2")
        x = g.node("Add", [x, y], f"block{i}")
    conv(g, x, channels, classes, 1, "logits", spatial=1)
    return g.model("kiln_tcn", [tensor("signal", [batch, features, seq])], [tensor("logits", [batch, classes, seq])])
