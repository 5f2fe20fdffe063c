"""The admission rules of `kiln serve --ray`, without Ray: the dispatcher over a ReplicaSet double whose
calls finish when the test says. A replica takes at most 2 calls and 1 BE call; RT goes first."""

from __future__ import annotations

import shutil
import threading
import time
from concurrent.futures import Future

import numpy as np
import pytest

import kiln
from kiln.distributed import replica_dispatcher
from kiln.distributed.replica_loads import Loads
from kiln.serve.dispatch import InferRequest, ModelConfig, Priority
from kiln.serve.repository import SERVE_TARGET
from tests.serve.http.models import tiny_mlp


class HeldReplicas:
    """A ReplicaSet double: each call waits in `calls` until `finish` runs the model for it."""

    def __init__(self, model, replicas: int = 1, threads=None, address=None, name: str = "model") -> None:
        self.model, self.replicas = model, replicas
        self.loads, self.lock = Loads(replicas), threading.Lock()
        self.calls: list[tuple[dict, int, bool, Future]] = []

    def free(self, limit, capped_limit=None):
        with self.lock:
            return self.loads.least_loaded(limit, capped_limit)

    def submit(self, feeds, output_names=None, replica=None, capped=False) -> Future:
        with self.lock:
            where = self.loads.least_loaded() if replica is None else replica
            self.loads.add(where, capped)
            self.calls.append((feeds, where, capped, Future()))
            return self.calls[-1][3]

    def finish(self, index: int) -> None:
        feeds, where, capped, future = self.calls[index]
        with self.lock:
            self.loads.remove(where, capped)
        future.set_result(dict(zip([o.name for o in self.model.outputs], self.model.run(feeds))))

    def up(self) -> int:
        return self.replicas

    def dead(self) -> bool:
        return False

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def mlp():
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed: the dispatcher runs a compiled model")
    return kiln.build(tiny_mlp(), target=SERVE_TARGET)


@pytest.fixture
def held(monkeypatch, mlp):
    sets: list[HeldReplicas] = []

    def make(*args, **kw):
        sets.append(HeldReplicas(*args, **kw))
        return sets[-1]
    monkeypatch.setattr(replica_dispatcher, "connect", lambda address: None)
    monkeypatch.setattr(replica_dispatcher, "ReplicaSet", make)
    d = replica_dispatcher.RayDispatcher()
    d.add("mlp", mlp, ModelConfig(replicas=2))
    yield d, sets[0]
    closer = threading.Thread(target=d.close, kwargs={"drain": False})
    closer.start()
    while closer.is_alive():  # a failed test may leave calls held: close waits for them
        for i, call in enumerate(list(sets[0].calls)):
            if not call[3].done():
                sets[0].finish(i)
        closer.join(0.05)


def _sent(replicas: HeldReplicas, n: int) -> list[tuple[int, bool]]:
    """(replica, BE) of the calls once `n` were sent; and no more arrive within a short wait."""
    deadline = time.monotonic() + 10
    while len(replicas.calls) < n:
        assert time.monotonic() < deadline, f"{len(replicas.calls)} calls sent, expected {n}"
        time.sleep(0.005)
    time.sleep(0.1)
    assert len(replicas.calls) == n
    return [(where, capped) for _, where, capped, _ in replicas.calls]


def _request(mlp, seed: int, priority: Priority) -> InferRequest:
    x = np.full(mlp.inputs[0].shape, seed, np.float32)
    return InferRequest("mlp", {"input": x}, priority=priority)


def test_be_takes_one_call_per_replica_and_rt_fills_the_rest_first(held, mlp):
    dispatcher, replicas = held
    be = [dispatcher.submit(_request(mlp, i, Priority.BE)) for i in range(4)]
    assert _sent(replicas, 2) == [(0, True), (1, True)]  # one BE call per replica; two BE wait
    rt = [dispatcher.submit(_request(mlp, 10 + i, Priority.RT)) for i in range(3)]
    assert _sent(replicas, 4)[2:] == [(0, False), (1, False)]  # RT fills each replica to 2; one RT waits
    replicas.finish(0)  # replica 0 has room again: the waiting RT goes before the waiting BE
    assert _sent(replicas, 5)[4] == (0, False)
    replicas.finish(2)  # replica 0 holds one RT call and no BE one: a BE request may join it
    assert _sent(replicas, 6)[5] == (0, True)
    replicas.finish(1)
    assert _sent(replicas, 7)[6] == (1, True)
    for i in range(3, 7):
        replicas.finish(i)
    for f, seed in zip([*be, *rt], [0, 1, 2, 3, 10, 11, 12]):
        np.testing.assert_array_equal(f.result(timeout=10)[mlp.outputs[0].name],
                                      mlp.run({"input": np.full(mlp.inputs[0].shape, seed, np.float32)})[0])
