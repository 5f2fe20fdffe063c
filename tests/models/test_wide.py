"""The wide benchmark set (kiln.models.wide): every model valid ONNX, batch where the builder puts it,
the interpreter matching ONNX Runtime on each tiny variant (the full sizes when slow), and the
families issue 31 asks for present."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import kiln
from kiln.errors import KilnError
from kiln.models.wide import INDEX_BOUND, WIDE, wide_feeds, wide_model
from tests.models.harness import ATOL, RTOL, onnxruntime_outputs

FAMILIES = {"cnn-plain", "cnn-residual", "cnn-inverted-se", "cnn-grouped", "cnn-depthwise", "cnn-dense",
            "cnn-multibranch", "cnn-large-kernel", "detection", "segmentation", "vision-transformer", "encoder",
            "decoder", "recurrent", "audio-conv1d", "mlp", "recommendation"}


def _matches_onnxruntime(model: onnx.ModelProto, outs: list) -> None:
    refs = onnxruntime_outputs(model, wide_feeds(model))
    assert len(outs) == len(refs)
    for o, r in zip(outs, refs):
        assert r.std() > 1e-3, "outputs would not tell a wrong model from a right one"
        if r.dtype == np.int64:  # NonMaxSuppression's selected boxes
            np.testing.assert_array_equal(o, r)
        else:
            # float32 rounding grows with the values' magnitude: the absolute bound scales with it
            np.testing.assert_allclose(o, r, rtol=RTOL, atol=ATOL * max(1.0, float(np.abs(r).max())))


def test_the_set_covers_the_issue_families() -> None:
    assert len(WIDE) >= 25
    assert FAMILIES <= {m.family for m in WIDE.values()}
    assert sum(m.family == "encoder" for m in WIDE.values()) >= 3  # several widths and sequence lengths


@pytest.mark.parametrize("name", sorted(WIDE))
def test_tiny_variant_matches_onnxruntime(name: str) -> None:
    model = WIDE[name].tiny(2)
    onnx.checker.check_model(model, full_check=True)
    _matches_onnxruntime(model, kiln.evaluate(kiln.from_onnx(model), wide_feeds(model)))


@pytest.mark.parametrize("name", sorted(WIDE))
@pytest.mark.parametrize("batch", [1, 8])
def test_builder_takes_the_batch(name: str, batch: int) -> None:
    first_output = WIDE[name].tiny(batch).graph.output[0].type.tensor_type.shape.dim[0]
    assert first_output.dim_value == batch


def test_integer_inputs_stay_inside_every_table() -> None:
    for name, entry in WIDE.items():
        model = entry.tiny(1)
        if any(i.type.tensor_type.elem_type == onnx.TensorProto.INT64 for i in model.graph.input):
            gathered = [n.input[0] for n in model.graph.node if n.op_type == "Gather"]
            rows = [t.dims[0] for t in model.graph.initializer if t.name in gathered and len(t.dims) == 2]
            assert rows and min(rows) >= INDEX_BOUND, name


def test_unknown_name_is_a_clear_error() -> None:
    with pytest.raises(KilnError, match="no model 'resnet1000'.*vgg11"):
        wide_model("resnet1000")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(WIDE))
def test_full_size_matches_onnxruntime(name: str) -> None:
    model = WIDE[name].build(1)
    onnx.checker.check_model(model)
    _matches_onnxruntime(model, kiln.evaluate(kiln.from_onnx(model), wide_feeds(model)))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(WIDE))
def test_tiny_variant_compiled_matches_onnxruntime(name: str) -> None:
    model = WIDE[name].tiny(2)
    sess = kiln.InferenceSession(kiln.build(kiln.from_onnx(model), opt_level=3), threads=1)
    _matches_onnxruntime(model, sess.run(None, wide_feeds(model)))
