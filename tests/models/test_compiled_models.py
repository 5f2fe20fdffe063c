"""The built-in models through the compiled executor (every fused group a C kernel) against ONNX
Runtime, and exactly which fused groups still run on the host and why."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest

import kiln
from kiln import models
from kiln.compiler.lower import build_graph_executor as build
from tests.models.harness import ATOL, RTOL, SMALL, feeds_for, onnxruntime_outputs

# What runs on the host today, per model: one regex per host group (matched as a multiset). Every
# built-in model compiles completely; a regression that sends a group back to the host fails here.
HOST = {
    "mlp": [], "resnet18": [], "resnet50": [], "mobilenet_v2": [], "bert_tiny": [], "small_cnn": [],
    "efficientnet_b0": [], "gpt_tiny": [],
}
FULL = {
    "resnet18": (lambda: models.resnet18(batch=1), []),
    "resnet50": (lambda: models.resnet50(batch=1), []),
    "mobilenet_v2": (lambda: models.mobilenet_v2(batch=1), []),
    "bert": (lambda: models.bert(batch=1), []),
    "efficientnet_b0": (lambda: models.efficientnet_b0(batch=1), []),
    "gpt": (lambda: models.gpt(batch=1), []),
}


def _check_host_groups(host: list[str], patterns: list[str]) -> None:
    assert len(host) == len(patterns), f"host groups: {host}"
    unmatched = list(host)
    for p in patterns:
        hit = next((h for h in unmatched if re.search(p, h)), None)
        assert hit is not None, f"no host group matches {p!r} among {unmatched}"
        unmatched.remove(hit)


def _compiled_matches_onnxruntime(model: onnx.ModelProto, batch: int, host: list[str]) -> None:
    cm = build(kiln.from_onnx(model))
    _check_host_groups(cm.host_groups, host)
    assert cm.kernels, "nothing was compiled"
    feeds = feeds_for(model, batch)
    outs = cm.run(feeds)
    refs = onnxruntime_outputs(model, feeds)
    assert len(outs) == len(refs)
    for o, r in zip(outs, refs):
        np.testing.assert_allclose(o, r, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_compiled_matches_onnxruntime(name: str) -> None:
    make, batch = SMALL[name]
    _compiled_matches_onnxruntime(make(batch), batch, HOST[name])


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FULL))
def test_full_size_compiled_matches_onnxruntime(name: str) -> None:
    make, host = FULL[name]
    _compiled_matches_onnxruntime(make(), 1, host)


@pytest.mark.parametrize("name", ["mlp", "bert_tiny", "resnet18"])
def test_one_build_serves_every_batch_size(name: str) -> None:
    model = SMALL[name][0]("batch")
    cm = build(kiln.from_onnx(model))
    _check_host_groups(cm.host_groups, HOST[name])
    for batch in (1, 3):
        feeds = feeds_for(model, batch, seed=batch)
        (out,) = cm.run(feeds)
        assert out.shape[0] == batch
        np.testing.assert_allclose(out, onnxruntime_outputs(model, feeds)[0], rtol=RTOL, atol=ATOL)


def test_profile_times_every_kernel() -> None:
    model = models.mlp(batch=2)
    cm = build(kiln.from_onnx(model))
    profile: dict[str, float] = {}
    cm.run(feeds_for(model, 2), profile=profile)
    assert len(profile) == 3 and all(t > 0 for t in profile.values())
