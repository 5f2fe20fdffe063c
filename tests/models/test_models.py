"""The built-in models: valid ONNX, torchvision's architectures (parameter counts), and the
interpreter matches ONNX Runtime on each (reduced input sizes here, full size when slow)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import kiln
from kiln import models
from kiln.errors import KilnError
from tests.models.harness import ATOL, FULL_INTERPRETED, RTOL, SMALL, feeds_for, onnxruntime_outputs


def _trainable(model: onnx.ModelProto) -> int:
    """Parameters as torchvision counts them: batch-norm running statistics are buffers, and shape
    and scalar constants are not parameters."""
    return sum(int(np.prod(t.dims)) for t in model.graph.initializer
               if not t.name.endswith((".mean", ".var")) and t.dims and t.data_type == onnx.TensorProto.FLOAT)


def _matches_onnxruntime(model: onnx.ModelProto, batch: int) -> None:
    feeds = feeds_for(model, batch)
    refs = onnxruntime_outputs(model, feeds)
    outs = kiln.evaluate(kiln.from_onnx(model), feeds)
    assert len(outs) == len(refs)
    for o, r in zip(outs, refs):
        assert r.std() > 1e-3, "outputs would not tell a wrong model from a right one"
        np.testing.assert_allclose(o, r, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_interpreter_matches_onnxruntime(name: str) -> None:
    build, batch = SMALL[name]
    model = build(batch)
    onnx.checker.check_model(model, full_check=True)
    _matches_onnxruntime(model, batch)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FULL_INTERPRETED))
def test_full_size_interpreter_matches_onnxruntime(name: str) -> None:
    _matches_onnxruntime(FULL_INTERPRETED[name](), 1)


@pytest.mark.parametrize("build,count", [
    (models.resnet18, 11_689_512), (models.resnet50, 25_557_032), (models.mobilenet_v2, 3_504_872),
    (models.efficientnet_b0, 5_288_548),
    (models.mlp, 784 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10)])
def test_parameter_counts_match_torchvision(build, count: int) -> None:
    assert _trainable(build()) == count


def test_bert_shape_and_parameter_count() -> None:
    layers, h, seq, vocab = 6, 384, 128, 30522
    model = models.bert()
    per_layer = 12 * h * h + 13 * h  # q, k, v, out projections; two layer norms; the 4h FFN
    assert _trainable(model) == vocab * h + seq * h + h + 2 * h + layers * per_layer
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("LayerNormalization") == 1 + 2 * layers and ops.count("Softmax") == layers
    assert ops.count("Erf") == layers and "Attention" not in ops


def test_gpt_shape_and_parameter_count() -> None:
    layers, h, seq, vocab = 6, 384, 128, 8192
    model = models.gpt()
    per_layer = 12 * h * h + 13 * h  # qkv and out projections; two layer norms; the 4h FFN
    assert _trainable(model) == 2 * vocab * h + seq * h + 2 * h + layers * per_layer
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("Where") == ops.count("Tanh") == ops.count("Split") == layers and "Attention" not in ops


def test_efficientnet_has_squeeze_excite_and_silu() -> None:
    ops = [n.op_type for n in models.efficientnet_b0().graph.node]
    assert ops.count("GlobalAveragePool") == 17  # one per block, and the head's
    # SiLU after 15 expand convs, 16 depthwise convs and 16 SE squeezes; 16 SE gates; the stem and head SiLU
    assert ops.count("Sigmoid") == 15 + 3 * 16 + 2


def test_mobilenet_depthwise_convs_are_grouped() -> None:
    convs = [n for n in models.mobilenet_v2().graph.node if n.op_type == "Conv"]
    groups = [next(a.i for a in n.attribute if a.name == "group") for n in convs]
    assert sum(g > 1 for g in groups) == 17  # one depthwise conv per inverted residual block
    assert sum(n.op_type == "Clip" for n in models.mobilenet_v2().graph.node) == 35


@pytest.mark.parametrize("name", ["mlp", "bert_tiny", "resnet18"])
def test_symbolic_batch_runs_at_any_size(name: str) -> None:
    model = SMALL[name][0]("batch")
    mod = kiln.from_onnx(model)
    for batch in (1, 3):
        feeds = feeds_for(model, batch, seed=batch)
        (out,) = kiln.evaluate(mod, feeds)
        assert out.shape[0] == batch
        np.testing.assert_allclose(out, onnxruntime_outputs(model, feeds)[0], rtol=RTOL, atol=ATOL)


def test_same_seed_same_weights_other_seed_other_weights() -> None:
    a, b, c = models.mlp(seed=1), models.mlp(seed=1), models.mlp(seed=2)
    assert a.SerializeToString() == b.SerializeToString() != c.SerializeToString()


def test_bert_rejects_heads_that_do_not_divide_hidden() -> None:
    with pytest.raises(KilnError, match="hidden size 100 is not a multiple of the head count 12"):
        models.bert(hidden=100)
