"""Tiered sessions (kiln.runtime.tiers): the first run answers from the generic kernels before any
model-specific compile finishes, every tier computes the interpreter's outputs, runs during the swap
included, and a failed build leaves the session on the generic tier with the error in its status."""

from __future__ import annotations

import gc
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import kiln
import kiln.compiler
from kiln.errors import CompileError
from kiln.models import mlp, small_cnn


def _feeds(seed: int, shape: tuple[int, ...] = (2, 3, 32, 32), name: str = "image") -> dict[str, np.ndarray]:
    return {name: np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}


@pytest.fixture
def gated_build(monkeypatch):
    """kiln.build held until the test opens the gate: a compiler as slow as the test wants."""
    gate = threading.Event()
    real = kiln.compiler.build

    def slow_build(*args, **kwargs):
        gate.wait(60)
        return real(*args, **kwargs)

    monkeypatch.setattr(kiln.compiler, "build", slow_build)
    yield gate
    gate.set()


def test_the_first_run_does_not_wait_for_the_build(gated_build):
    model = small_cnn(batch=2)
    sess = kiln.InferenceSession(model)
    feeds = _feeds(0)
    out = sess.run(None, feeds)  # the build is held: this can only come from the generic tier
    assert sess.status.tier == "generic"
    np.testing.assert_allclose(out[0], kiln.evaluate(kiln.from_onnx(model), feeds)[0], rtol=1e-4, atol=1e-5)
    assert sess.get_outputs()[0].name == "probs"


def test_runs_during_the_swap_each_equal_the_interpreter(gated_build):
    model = mlp(batch=4)
    mod = kiln.from_onnx(model)
    sess = kiln.InferenceSession(model)
    inputs = [_feeds(s, (4, 784), "input") for s in range(4)]
    want = [kiln.evaluate(mod, f)[0] for f in inputs]
    tiers_seen: list[str] = []

    def runs_until_specialized(k: int) -> int:
        n = 0
        while True:
            tier = sess.status.tier
            got = sess.run(None, inputs[k % 4])[0]
            np.testing.assert_allclose(got, want[k % 4], rtol=1e-4, atol=1e-5)
            tiers_seen.append(tier)
            n += 1
            if tier == "specialized" and n > 3:
                return n

    with ThreadPoolExecutor(3) as pool:
        loops = [pool.submit(runs_until_specialized, k) for k in range(3)]
        gated_build.set()
        assert all(f.result(timeout=300) > 3 for f in loops)
    assert tiers_seen[0] == "generic" and tiers_seen[-1] == "specialized"
    status = sess.status
    assert status.tier == "specialized" and status.kernels_compiled == status.kernels_total > 0
    assert sess.model.executor == "aot"


def test_progress_is_reported_and_ends_specialized():
    seen = []
    sess = kiln.InferenceSession(mlp(batch=1), on_status=seen.append)
    model = sess.wait_for_compile(timeout=300).model
    assert model.executor == "aot"
    assert seen[-1].tier == "specialized" and seen[-1].kernels_compiled == seen[-1].kernels_total
    assert "specialized" in str(sess.status)


def test_a_failed_build_keeps_the_generic_tier(monkeypatch):
    def broken_build(*args, **kwargs):
        raise CompileError("gcc is broken today")

    monkeypatch.setattr(kiln.compiler, "build", broken_build)
    model = mlp(batch=1)
    sess = kiln.InferenceSession(model)
    with pytest.raises(CompileError, match="broken today"):
        sess.wait_for_compile(timeout=60)
    assert sess.status.tier == "failed" and "broken today" in sess.status.error
    feeds = _feeds(1, (1, 784), "input")
    np.testing.assert_allclose(sess.run(None, feeds)[0], kiln.evaluate(kiln.from_onnx(model), feeds)[0],
                               rtol=1e-4, atol=1e-5)
    with pytest.raises(CompileError):
        _ = sess.model


def test_wait_for_compile_builds_first():
    sess = kiln.InferenceSession(mlp(batch=1), wait_for_compile=True)
    assert sess.status.tier == "specialized" and sess.status.kernels_total == sess.model.report.kernels


def test_run_async_on_a_tiered_session(gated_build):
    model = mlp(batch=2)
    sess = kiln.InferenceSession(model)
    feeds = _feeds(3, (2, 784), "input")
    got = sess.run_async(None, feeds).result(timeout=60)
    np.testing.assert_allclose(got[0], kiln.evaluate(kiln.from_onnx(model), feeds)[0], rtol=1e-4, atol=1e-5)


def test_a_loaded_model_is_specialized_from_the_start(tmp_path):
    directory = kiln.build(mlp(batch=1)).export(tmp_path / "m")
    status = kiln.load(directory).status
    assert status.tier == "specialized" and "compiled before this session" in str(status)


def test_the_generic_tier_and_its_weights_are_let_go_once_the_model_runs(gated_build):
    """Issue 35: the imported weights the generic tier runs on would stay beside the model's packed copy."""
    model = mlp(batch=1)
    sess = kiln.InferenceSession(model)
    assert sess.module is sess._tiers.generic.mod  # the imported graph while the build runs
    generic = weakref.ref(sess._tiers.generic)
    gated_build.set()
    sess.wait_for_compile(timeout=300)
    gc.collect()
    assert sess._tiers.generic is None and generic() is None
    assert sess.module is sess.model.mod
    assert [i.name for i in sess.get_inputs()] == ["input"] and sess.get_outputs()[0].name == "fc2"
    feeds = _feeds(4, (1, 784), "input")
    np.testing.assert_allclose(sess.run(None, feeds)[0], kiln.evaluate(kiln.from_onnx(model), feeds)[0],
                               rtol=1e-4, atol=1e-5)
