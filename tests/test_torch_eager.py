"""scripts/torch_eager.py: the PyTorch eager peer replays every wide-set model as ONNX Runtime runs it,
and names the op it cannot replay."""

import sys
from pathlib import Path

import numpy as np
import pytest

from kiln.models.wide import WIDE, wide_feeds
from tests.models.harness import onnxruntime_outputs

pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from torch_eager import EagerReplay  # noqa: E402

NO_TORCH_OP = {"detector": "NonMaxSuppression"}  # torch has no NMS without torchvision


@pytest.mark.parametrize("name", sorted(set(WIDE) - set(NO_TORCH_OP)))
def test_replay_matches_onnxruntime(name):
    model = WIDE[name].tiny(2)
    feeds = wide_feeds(model)
    for out, ref in zip(EagerReplay(model, 1).run(feeds), onnxruntime_outputs(model, feeds)):
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(ref).max())))


@pytest.mark.parametrize("name", sorted(NO_TORCH_OP))
def test_an_op_without_a_mapping_is_named(name):
    with pytest.raises(NotImplementedError, match=NO_TORCH_OP[name]):
        EagerReplay(WIDE[name].tiny(1), 1)
