"""The wide benchmark set (issue 31): the model families users deploy, each a builder from code with
fixed-seed weights, at its benchmark size and as a tiny variant (the same graph shape, small enough
for every test run). `make bench-wide` (scripts/bench_wide.py) times the set against ONNX Runtime."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx

from kiln.errors import KilnError
from kiln.models.audio import tcn, wav2vec_features
from kiln.models.bert import bert
from kiln.models.convnext import convnext
from kiln.models.densenet import densenet
from kiln.models.detection import detector
from kiln.models.dlrm import dlrm
from kiln.models.efficientnet import efficientnet_b0
from kiln.models.googlenet import googlenet
from kiln.models.gpt import gpt
from kiln.models.mlp import mlp
from kiln.models.mobilenet import mobilenet_v2
from kiln.models.mobilenet_v3 import mobilenet_v3
from kiln.models.resnet import resnet18, resnet50
from kiln.models.resnext import resnext
from kiln.models.rnn import gru, lstm
from kiln.models.shufflenet import shufflenet_v2
from kiln.models.unet import unet
from kiln.models.vgg import vgg
from kiln.models.vit import vit

INDEX_BOUND = 1000  # integer inputs (token ids, embedding rows) are drawn below this; every table is larger

Builder = Callable[[int], onnx.ModelProto]


@dataclass(frozen=True)
class WideModel:
    name: str
    family: str
    build: Builder  # batch -> the benchmark-size model
    tiny: Builder  # batch -> the same architecture, reduced


WIDE: dict[str, WideModel] = {m.name: m for m in (
    WideModel("vgg11", "cnn-plain", lambda b: vgg(batch=b), lambda b: vgg(batch=b, size=32, width=0.125, hidden=64)),
    WideModel("resnet18", "cnn-residual", lambda b: resnet18(batch=b), lambda b: resnet18(batch=b, size=32)),
    WideModel("resnet50", "cnn-residual", lambda b: resnet50(batch=b), lambda b: resnet50(batch=b, size=32)),
    WideModel("resnext50", "cnn-grouped", lambda b: resnext(batch=b),
              lambda b: resnext(batch=b, size=32, layers=(1, 1, 1, 1), groups=4, base=16)),
    WideModel("mobilenet_v2", "cnn-depthwise", lambda b: mobilenet_v2(batch=b),
              lambda b: mobilenet_v2(batch=b, size=32, width=0.25)),
    WideModel("mobilenet_v3", "cnn-inverted-se", lambda b: mobilenet_v3(batch=b),
              lambda b: mobilenet_v3(batch=b, size=32, width=0.25)),
    WideModel("efficientnet_b0", "cnn-inverted-se", lambda b: efficientnet_b0(batch=b),
              lambda b: efficientnet_b0(batch=b, size=32)),
    WideModel("shufflenet_v2", "cnn-shuffle", lambda b: shufflenet_v2(batch=b),
              lambda b: shufflenet_v2(batch=b, size=64, channels=(16, 32, 64), stem=8, last=64)),
    WideModel("densenet", "cnn-dense", lambda b: densenet(batch=b),
              lambda b: densenet(batch=b, size=32, blocks=(2, 2), growth=8, stem=16)),
    WideModel("googlenet", "cnn-multibranch", lambda b: googlenet(batch=b),
              lambda b: googlenet(batch=b, size=64, width=0.125)),
    WideModel("convnext", "cnn-large-kernel", lambda b: convnext(batch=b),
              lambda b: convnext(batch=b, size=32, depths=(1, 1, 1, 1), dims=(8, 16, 24, 32))),
    WideModel("detector", "detection", lambda b: detector(batch=b),
              lambda b: detector(batch=b, size=64, width=4, classes=3)),
    WideModel("unet", "segmentation", lambda b: unet(batch=b), lambda b: unet(batch=b, size=32, base=4, depth=2)),
    WideModel("unet_bilinear", "segmentation", lambda b: unet(batch=b, transposed=False),
              lambda b: unet(batch=b, size=32, base=4, depth=2, transposed=False)),
    WideModel("vit_tiny", "vision-transformer", lambda b: vit(batch=b),
              lambda b: vit(batch=b, size=32, patch=8, hidden=32, layers=2, heads=2)),
    WideModel("bert", "encoder", lambda b: bert(batch=b), lambda b: bert(batch=b, layers=1, hidden=32, heads=2,
                                                                        seq=16, vocab=INDEX_BOUND)),
    WideModel("encoder_small", "encoder", lambda b: bert(batch=b, layers=4, hidden=256, heads=4, seq=64),
              lambda b: bert(batch=b, layers=1, hidden=32, heads=4, seq=8, vocab=INDEX_BOUND)),
    WideModel("encoder_base", "encoder", lambda b: bert(batch=b, layers=2, hidden=768, heads=12, seq=128),
              lambda b: bert(batch=b, layers=1, hidden=48, heads=6, seq=16, vocab=INDEX_BOUND)),
    WideModel("encoder_long", "encoder", lambda b: bert(batch=b, layers=2, hidden=256, heads=4, seq=512),
              lambda b: bert(batch=b, layers=1, hidden=32, heads=2, seq=64, vocab=INDEX_BOUND)),
    WideModel("gpt", "decoder", lambda b: gpt(batch=b),
              lambda b: gpt(batch=b, layers=1, hidden=32, heads=2, seq=16, vocab=INDEX_BOUND)),
    WideModel("lstm", "recurrent", lambda b: lstm(batch=b), lambda b: lstm(batch=b, seq=8, features=8, hidden=16)),
    WideModel("gru", "recurrent", lambda b: gru(batch=b), lambda b: gru(batch=b, seq=8, features=8, hidden=16)),
    WideModel("wav2vec_features", "audio-conv1d", lambda b: wav2vec_features(batch=b),
              lambda b: wav2vec_features(batch=b, samples=800, channels=16, hidden=16)),
    WideModel("tcn", "audio-conv1d", lambda b: tcn(batch=b),
              lambda b: tcn(batch=b, seq=32, features=8, channels=16, dilations=(1, 2, 4))),
    WideModel("mlp", "mlp", lambda b: mlp(batch=b), lambda b: mlp(batch=b, sizes=(32, 64, 64, 10))),
    WideModel("mlp_deep", "mlp", lambda b: mlp(batch=b, sizes=(256,) + (512,) * 8 + (10,)),
              lambda b: mlp(batch=b, sizes=(16,) + (32,) * 8 + (10,))),
    WideModel("dlrm", "recommendation", lambda b: dlrm(batch=b),
              lambda b: dlrm(batch=b, tables=3, rows=INDEX_BOUND, dim=8, bottom=(16,), top=(16,))),
)}


def wide_model(name: str) -> WideModel:
    if name not in WIDE:
        raise KilnError(f"no model {name!r} in the wide benchmark set; it has {', '.join(WIDE)}")
    return WIDE[name]


def wide_feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs for a wide-set model of static shape: normal floats, integer ids below INDEX_BOUND."""
    rng = np.random.default_rng(seed)
    out = {}
    for vi in model.graph.input:
        tt = vi.type.tensor_type
        shape = [d.dim_value for d in tt.shape.dim]
        if tt.elem_type == onnx.TensorProto.INT64:
            out[vi.name] = rng.integers(0, INDEX_BOUND, shape).astype(np.int64)
        else:
            out[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return out
