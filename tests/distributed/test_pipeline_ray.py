"""Pipelines on a local Ray cluster the tests start: results equal to one process, many requests in flight,
compiled graphs, an actor killed under load (none lost, none answered twice), and each failure an error."""

from __future__ import annotations

import time

import numpy as np
import pytest

import kiln
from kiln.distributed import Pipeline
from kiln.errors import DistributedError, KilnError
from kiln.models import mlp
from tests.distributed.pipeline_models import residual_cnn

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def cluster():
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def cnn(cluster):
    model = residual_cnn()
    with Pipeline(model, stages=2, threads_per_stage=1) as pipe:
        yield pipe, kiln.build(model)


def _images(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [rng.standard_normal((1, 3, 8, 8)).astype(np.float32) for _ in range(n)]


def test_results_equal_one_process_with_many_in_flight(cnn):
    pipe, whole = cnn
    images = _images(64)
    futures = [pipe.run_async(None, {"image": x}) for x in images]
    for x, f in zip(images, futures, strict=True):
        np.testing.assert_allclose(f.result()[0], whole.run({"image": x})[0], rtol=1e-5, atol=1e-6)
    assert pipe.run(["logits"], {"image": images[0]})[0].shape == (1, 5)


def test_report_and_counts_show_the_cut_and_the_bytes(cnn):
    pipe, _ = cnn
    assert "cut kiln_cut_" in pipe.report and "stage 1: pid" in pipe.report
    counts = pipe.stage_counts()
    assert counts[0]["requests"] >= 1 and counts[0]["bytes_out"] == counts[1]["bytes_in"]


def test_wrong_names_are_errors(cnn):
    pipe, _ = cnn
    with pytest.raises(KilnError, match=r"no outputs \['nope'\]"):
        pipe.run(["nope"], {"image": _images(1)[0]})
    with pytest.raises(KilnError, match=r"missing \['image'\], unknown \['x'\]"):
        pipe.run(None, {"x": _images(1)[0]})


def test_an_actor_killed_during_1000_requests_loses_and_repeats_none(cnn):
    pipe, whole = cnn
    images = _images(1000)
    futures = []
    for i, x in enumerate(images):
        futures.append(pipe.run_async(None, {"image": x}))
        if i == 300:
            ray.kill(pipe.actors[1], no_restart=False)
    results = [f.result(timeout=300)[0] for f in futures]
    for x, got in zip(images, results, strict=True):
        np.testing.assert_allclose(got, whole.run({"image": x})[0], rtol=1e-5, atol=1e-6)
    assert pipe.stats["failed"] == 0 and pipe.stats["resubmitted"] > 0
    assert pipe.stats["answered"] == 64 + 1 + 1000  # this module's requests so far, each answered once


def test_compiled_graph_gives_the_same_results_and_survives_a_kill(cluster):
    model = mlp(batch=1, sizes=(32, 64, 64, 10))
    whole = kiln.build(model)
    xs = [np.full((1, 32), i / 10, np.float32) for i in range(200)]
    with Pipeline(model, stages=2, threads_per_stage=1, compiled_graph=True) as pipe:
        futures = [pipe.run_async(None, {"input": x}) for x in xs[:40]]
        for x, f in zip(xs[:40], futures, strict=True):
            np.testing.assert_array_equal(f.result()[0], whole.run({"input": x})[0])
        futures = []
        for i, x in enumerate(xs):
            futures.append(pipe.run_async(None, {"input": x}))
            if i == 50:
                ray.kill(pipe.actors[1], no_restart=False)
        for x, f in zip(xs, futures, strict=True):
            np.testing.assert_array_equal(f.result(timeout=300)[0], whole.run({"input": x})[0])
        assert pipe.stats["answered"] == 240 and pipe.stats["failed"] == 0 and pipe.stats["resubmitted"] > 0


def test_a_cluster_too_small_is_an_error_not_a_wait(cluster):
    t0 = time.monotonic()
    with pytest.raises(DistributedError, match=r"could not hold 2 stage\(s\) of 64 CPU\(s\) \(PACK\) within 2 s"):
        Pipeline(mlp(batch=1, sizes=(8, 8, 4)), stages=2, threads_per_stage=64, timeout_s=2)
    assert time.monotonic() - t0 < 60
    assert not [p for p in ray.util.placement_group_table().values() if p["state"] == "PENDING"]


def test_a_stage_that_fails_to_load_is_named(cluster, monkeypatch):
    from kiln.distributed import bundle, pipeline

    packed = []

    def pack(directory):
        files = bundle.pack(directory)
        packed.append(files)
        return {**files, "model.json": b"{"} if len(packed) == 2 else files

    monkeypatch.setattr(pipeline, "pack", pack)
    with pytest.raises(DistributedError, match="stage 1 of 2 failed to load"):
        Pipeline(mlp(batch=1, sizes=(8, 8, 4)), stages=2, threads_per_stage=1, timeout_s=60)


def test_an_actor_dead_beyond_its_restarts_fails_requests(cluster):
    with Pipeline(mlp(batch=1, sizes=(8, 8, 4)), stages=2, threads_per_stage=1, max_restarts=0, timeout_s=60) as pipe:
        x = {"input": np.ones((1, 8), np.float32)}
        pipe.run(None, x)
        ray.kill(pipe.actors[0], no_restart=True)
        t0 = time.monotonic()
        with pytest.raises(DistributedError, match="lost its stage actors"):
            pipe.run(None, x)
        assert time.monotonic() - t0 < 30
    with pytest.raises(DistributedError, match="closed"):
        pipe.run(None, x)
