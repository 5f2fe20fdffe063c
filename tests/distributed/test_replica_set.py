"""ReplicaSet on a local Ray cluster: answers equal a solo run, least-loaded routing, a replica killed
during 1,000 requests loses and duplicates none, and a call without an answer is an error, not a hang."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from kiln.distributed.replica_set import ReplicaSet
from kiln.errors import DistributedError, InputError
from tests.distributed.ray_cluster import compiled_models, local_cluster

pytestmark = pytest.mark.ray
ray_cluster = local_cluster(num_cpus=4)  # logical CPUs: two sets of two replicas at once


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return compiled_models(tmp_path_factory)


@pytest.fixture(scope="module")
def mlp_set(ray_cluster, models):
    replicas = ReplicaSet(models["mlp"], replicas=2, name="mlp")
    yield replicas
    replicas.close()


def _feeds(model, seed: int) -> dict[str, np.ndarray]:
    info = model.inputs[0]
    return {info.name: np.random.default_rng(seed).standard_normal(info.shape).astype(info.dtype)}


def test_answers_equal_a_solo_run_on_two_processes(mlp_set, models):
    model = models["mlp"]
    feeds = _feeds(model, 0)
    (got,) = mlp_set.run(None, feeds)
    np.testing.assert_array_equal(got, model.run(feeds)[0])
    named = mlp_set.submit(feeds, [model.outputs[0].name]).result(timeout=60)
    assert list(named) == [model.outputs[0].name]
    assert len(set(mlp_set.pids)) == 2 and mlp_set.up() == 2


def test_requests_go_to_the_least_loaded_replica(ray_cluster, models):
    slow = ReplicaSet(models["slow"], replicas=2, name="slow")
    try:
        feeds = _feeds(models["slow"], 1)
        first = [slow.submit(feeds) for _ in range(4)]
        assert slow.in_flight() == [2, 2]  # a run takes milliseconds: none answered yet
        pinned = slow.submit(feeds, replica=0)
        assert slow.in_flight() == [3, 2]
        assert slow.free(limit=3) == 1 and slow.free(limit=2) is None
        nxt = slow.submit(feeds)
        assert slow.in_flight() == [3, 3]
        for f in [*first, pinned, nxt]:
            f.result(timeout=60)
        assert slow.in_flight() == [0, 0]
    finally:
        slow.close()


def test_a_replica_killed_during_1000_requests_loses_and_duplicates_none(ray_cluster, mlp_set, models):
    ray = ray_cluster
    model = models["mlp"]
    inputs = [_feeds(model, seed) for seed in range(10)]
    expect = [model.run(f)[0] for f in inputs]
    completions = [0] * 1000
    lock = threading.Lock()

    def count(i: int):
        def done(_):
            with lock:
                completions[i] += 1
        return done

    futures = []
    for i in range(1000):
        f = mlp_set.submit(inputs[i % 10])
        f.add_done_callback(count(i))
        futures.append(f)
        if i == 300:
            ray.kill(mlp_set.actor(0), no_restart=False)
    answers = [f.result(timeout=120) for f in futures]
    name = model.outputs[0].name
    for i, answer in enumerate(answers):
        np.testing.assert_array_equal(answer[name], expect[i % 10])
    assert completions == [1] * 1000
    assert mlp_set.retries > 0  # the killed replica had calls in flight
    deadline = time.monotonic() + 60
    while mlp_set.up() < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert mlp_set.up() == 2  # Ray restarted it
    np.testing.assert_array_equal(mlp_set.run(None, inputs[0])[0], expect[0])


def test_a_call_unanswered_in_time_is_an_error_not_a_hang(ray_cluster, models):
    slow = ReplicaSet(models["slow"], replicas=1, call_timeout_s=0.002, name="slow")
    try:
        with pytest.raises(DistributedError, match="no answer within 0.002 s"):
            slow.run(None, _feeds(models["slow"], 2))
    finally:
        slow.close()


def test_a_cluster_without_the_cores_asked_for_is_an_error(ray_cluster, models):
    with pytest.raises(DistributedError, match=r"did not give 1 replica\(s\) of 64 CPU"):
        ReplicaSet(models["mlp"], threads=64, start_timeout_s=1)


def test_the_models_own_error_comes_back_and_is_not_retried(mlp_set):
    with pytest.raises(InputError, match="input"):
        mlp_set.run(None, {"input": np.zeros((3, 3), np.float32)})
    assert mlp_set.up() == 2


def test_settings_and_a_closed_set_are_checked(ray_cluster, models):
    with pytest.raises(DistributedError, match="replicas=0"):
        ReplicaSet(models["mlp"], replicas=0)
    with pytest.raises(DistributedError, match="max_attempts=0"):
        ReplicaSet(models["mlp"], max_attempts=0)
    one = ReplicaSet(models["mlp"], replicas=1)
    one.close()
    one.close()
    with pytest.raises(DistributedError, match="closed"):
        one.submit(_feeds(models["mlp"], 3))
