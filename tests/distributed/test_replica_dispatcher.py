"""The dispatcher of `kiln serve --ray` on a local Ray cluster: RT requests overtake queued BE ones,
queue limits and timeouts hold, batching is refused, readiness follows the replicas."""

from __future__ import annotations

import collections
import threading

import numpy as np
import pytest

from kiln.distributed.replica_dispatcher import RayDispatcher
from kiln.errors import QueueFullError, RequestTimeoutError, ServeError
from kiln.serve.dispatch import InferRequest, ModelConfig, Priority
from tests.distributed.ray_cluster import compiled_models, local_cluster

pytestmark = pytest.mark.ray
ray_cluster = local_cluster(num_cpus=2)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return compiled_models(tmp_path_factory)


@pytest.fixture
def dispatcher(ray_cluster):
    d = RayDispatcher()
    yield d
    d.close()


def _request(model, name: str, seed: int = 0, **kw) -> InferRequest:
    info = model.inputs[0]
    x = np.random.default_rng(seed).standard_normal(info.shape).astype(info.dtype)
    return InferRequest(name, {info.name: x}, **kw)


def test_rt_overtakes_queued_be_requests(dispatcher, models):
    slow = models["slow"]
    dispatcher.add("slow", slow, ModelConfig())  # BE by default, one replica
    order, lock = [], threading.Lock()

    def note(tag):
        def done(_):
            with lock:
                order.append(tag)
        return done

    futures = []
    for i in range(6):
        futures.append(dispatcher.submit(_request(slow, "slow", i)))
        futures[-1].add_done_callback(note(f"be{i}"))
    rt = dispatcher.submit(_request(slow, "slow", 9, priority=Priority.RT))
    rt.add_done_callback(note("rt"))
    for f in [*futures, rt]:
        f.result(timeout=60)
    assert order.index("rt") <= 1  # behind at most the one BE run its replica held
    np.testing.assert_array_equal(rt.result()[slow.outputs[0].name],
                                  slow.run(_request(slow, "slow", 9).feeds)[0])
    stats = dispatcher.stats()["slow"]
    assert stats.requests == 7 and stats.failures == 0


def test_queue_limit_and_timeout_hold(dispatcher, models):
    slow = models["slow"]
    dispatcher.add("slow", slow, ModelConfig(queue_limit=2))
    futures = [dispatcher.submit(_request(slow, "slow", i)) for i in range(6)]
    refused = [f for f in futures if f.done() and isinstance(f.exception(), QueueFullError)]
    assert len(refused) >= 3  # one BE call on the replica, two queued: the rest are over the limit
    for f in futures:
        if f not in refused:
            f.result(timeout=60)
    busy = dispatcher.submit(_request(slow, "slow", 7))
    late = dispatcher.submit(_request(slow, "slow", 8, timeout_s=1e-4))
    with pytest.raises(RequestTimeoutError, match="waited"):
        late.result(timeout=60)
    busy.result(timeout=60)
    stats = dispatcher.stats()["slow"]
    assert stats.refused == len(refused) and stats.timeouts == 1


def test_batching_is_refused_and_ready_follows_the_replicas(dispatcher, models):
    with pytest.raises(ServeError, match="max_batch=4.*does not batch"):
        dispatcher.add("mlp", models["mlp"], ModelConfig(max_batch=4))
    assert not dispatcher.ready("mlp")
    dispatcher.add("mlp", models["mlp"], ModelConfig(replicas=2))
    assert dispatcher.ready("mlp") and dispatcher.replicas("mlp").up() == 2
    dispatcher.remove("mlp")
    assert not dispatcher.ready("mlp")


def test_a_replica_killed_during_1000_served_requests_loses_and_duplicates_none(ray_cluster, dispatcher, models):
    mlp = models["mlp"]
    dispatcher.add("mlp", mlp, ModelConfig(replicas=2, queue_limit=1000))
    requests = [_request(mlp, "mlp", i % 10, priority=Priority.RT if i % 3 == 0 else Priority.BE)
                for i in range(1000)]
    expect = [mlp.run(r.feeds)[0] for r in requests[:10]]
    completions = collections.Counter()
    futures = []
    for i, r in enumerate(requests):
        futures.append(dispatcher.submit(r))
        futures[-1].add_done_callback(lambda _, i=i: completions.update([i]))
        if i == 300:
            ray_cluster.kill(dispatcher.replicas("mlp").actor(0), no_restart=False)
    name = mlp.outputs[0].name
    for i, f in enumerate(futures):
        np.testing.assert_array_equal(f.result(timeout=120)[name], expect[i % 10])
    assert set(completions.values()) == {1} and len(completions) == 1000
    stats = dispatcher.stats()["mlp"]
    assert (stats.requests, stats.failures, stats.refused) == (1000, 0, 0)
