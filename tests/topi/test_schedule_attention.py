"""The schedule of the general nn.attention compute (softmax probabilities in a buffer, Q K^T
vectorized over keys): compiled against the interpreter on odd shapes, causal masks, grouped heads
and packed 3-D heads."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import kiln
import kiln.topi.schedule_dispatch as dispatch
from kiln.compiler.fuse import fuse
from kiln.compiler.lower import lower_groups
from kiln.ir import Function, IRModule, TensorType, Var
from kiln.op import get_op
from kiln.topi.knobs import applying
from tests.topi.conftest import recording

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")
F32 = "float32"
rng = np.random.default_rng(2)


@pytest.fixture(autouse=True)
def fresh_caches(tmp_path, monkeypatch):
    """Lower every group afresh (a kernel-cache hit would skip the schedule and the knobs under
    test), with the general attention compute: the blocked x86 attention, where present, is off."""
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    if hasattr(dispatch, "schedule_attention_blocked"):
        monkeypatch.setattr(dispatch, "schedule_attention_blocked", lambda outputs, target: None)


def _attention(qs, ks, vs, **attrs):
    q, k, v = Var("q", TensorType(qs, F32)), Var("k", TensorType(ks, F32)), Var("v", TensorType(vs, F32))
    return IRModule({"main": Function((q, k, v), get_op("nn.attention")(q, k, v, **attrs))})


def _check(mod: IRModule, config=None) -> None:
    feeds = {p.name: rng.standard_normal(p.type.shape).astype(np.float32) for p in mod.main.params}
    with applying(config or {}):
        model = kiln.build(mod, executor="graph")
    assert not model.host_groups
    for g, w in zip(model.run(feeds), kiln.evaluate(mod, feeds)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


# packed 3-D heads (B, S, heads * D) whose qk output is the probabilities: the general attention compute
GENERAL = dict(qk_matmul_output_mode=3)


@pytest.mark.parametrize("qs, ks, attrs", [
    ((1, 7, 10), (1, 13, 10), dict(q_num_heads=2, kv_num_heads=2)),
    ((2, 1, 24), (2, 1, 24), dict(q_num_heads=3, kv_num_heads=3)),
    ((1, 17, 64), (1, 17, 64), dict(q_num_heads=4, kv_num_heads=4, is_causal=1)),
    ((1, 9, 32), (1, 33, 16), dict(q_num_heads=4, kv_num_heads=2, scale=0.3)),  # grouped query heads
])
def test_attention_matches_interpreter(monkeypatch, qs, ks, attrs):
    names = []
    monkeypatch.setattr(dispatch, "schedule_attention", recording(dispatch.schedule_attention, names))
    _check(_attention(qs, ks, ks, **attrs, **GENERAL))
    assert names == ["schedule_attention"]


def test_4d_heads_with_probabilities_as_qk_output():
    _check(_attention((1, 2, 6, 4), (1, 2, 9, 4), (1, 2, 9, 4), qk_matmul_output_mode=3))


@pytest.mark.parametrize("run", [8, 32, 64])
def test_score_run_knob(run):
    _check(_attention((1, 6, 8), (1, 70, 8), (1, 70, 8), q_num_heads=2, kv_num_heads=2, **GENERAL),
           {"attention.score_run": run})


def test_probabilities_are_computed_once():
    mod = _attention((1, 8, 8), (1, 8, 8), (1, 8, 8), q_num_heads=2, kv_num_heads=2, **GENERAL)
    kernels, _, _ = lower_groups(fuse(mod))
    from kiln.codegen.c_source import generate

    src = generate([k.func for k in kernels]).code
    assert "attn_probs[" in src
