"""The classic pipeline controller against a stand-in for Ray (no cluster): retries from stage 0, each
request answered once, deadlines, actors dead beyond their restarts, and a lost cluster connection."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from kiln.distributed.pipeline_requests import ChainController
from kiln.errors import DistributedError


class RayActorError(Exception):
    pass


class ActorDiedError(RayActorError):
    pass


class ActorUnavailableError(RayActorError):
    pass


class ObjectLostError(Exception):
    pass


class Ref:
    """A finished call: its value, or the error it failed with (None: never finishes)."""

    def __init__(self, value=None, error=None, ready=True):
        self.value, self.error, self.ready = value, error, ready


class FakeRay:
    exceptions = SimpleNamespace(RayActorError=RayActorError, ActorDiedError=ActorDiedError,
                                 ObjectLostError=ObjectLostError)

    def __init__(self):
        self.lost = threading.Event()

    def wait(self, refs, num_returns, timeout, fetch_local):
        if self.lost.is_set():
            raise ConnectionError("GCS unreachable")
        ready = [r for r in refs if r.ready]
        if len(ready) < num_returns and timeout:
            threading.Event().wait(min(timeout, 0.005))
        return ready, [r for r in refs if not r.ready]

    def get(self, ref, timeout):
        if ref.error is not None:
            raise ref.error
        return ref.value


class Stage:
    """A stage actor that adds `add` to the value; its first calls fail as `failures` says."""

    def __init__(self, add, failures=(), stuck=False):
        self.add, self.failures, self.stuck, self.calls = add, list(failures), stuck, 0
        self.step = SimpleNamespace(remote=self._call)

    def _call(self, arg):
        self.calls += 1
        if isinstance(arg, Ref):
            if arg.error is not None:
                return arg  # a failed argument fails the call with the same error, as Ray's do
            arg = arg.value
        if self.stuck:
            return Ref(ready=False)
        if self.failures:
            return Ref(error=self.failures.pop(0))
        return Ref({"x": arg["x"] + self.add})


def _answers(controller, n):
    futures = [controller.submit({"x": i}, lambda v: v["x"]) for i in range(n)]
    return [f.result(timeout=10) for f in futures]


def test_a_chain_lost_to_a_restart_is_retried_from_stage_zero_and_answered_once():
    first, second = Stage(1), Stage(10, [ActorUnavailableError("restarting")] * 3 + [ActorDiedError("killed")])
    controller = ChainController(FakeRay(), [first, second], timeout_s=10, max_restarts=3)
    assert _answers(controller, 20) == [i + 11 for i in range(20)]
    assert controller.stats == {"answered": 20, "failed": 0, "resubmitted": 4}
    assert first.calls == 24  # every retry starts again at stage 0
    controller.stop()


def test_an_error_of_the_stage_itself_is_not_retried():
    controller = ChainController(FakeRay(), [Stage(1, [ValueError("bad shape")])], timeout_s=10, max_restarts=3)
    with pytest.raises(ValueError, match="bad shape"):
        controller.submit({"x": 0}, lambda v: v).result(timeout=10)
    assert controller.stats["resubmitted"] == 0
    controller.stop()


def test_deaths_beyond_the_restarts_fail_the_request():
    dead = Stage(1, [ActorDiedError("gone")] * 10)
    controller = ChainController(FakeRay(), [dead], timeout_s=30, max_restarts=1)
    with pytest.raises(DistributedError, match=r"lost its stage actors 3 time\(s\) \(3 death"):
        controller.submit({"x": 0}, lambda v: v).result(timeout=10)
    controller.stop()


def test_a_request_past_its_deadline_fails_instead_of_waiting():
    controller = ChainController(FakeRay(), [Stage(1, stuck=True)], timeout_s=0.2, max_restarts=3)
    with pytest.raises(DistributedError, match=r"no answer within 0.2 s"):
        controller.submit({"x": 0}, lambda v: v).result(timeout=10)
    controller.stop()


def test_a_lost_cluster_fails_every_open_request_and_refuses_new_ones():
    ray = FakeRay()
    controller = ChainController(ray, [Stage(1, stuck=True)], timeout_s=60, max_restarts=3)
    futures = [controller.submit({"x": i}, lambda v: v) for i in range(3)]
    ray.lost.set()
    for f in futures:
        with pytest.raises(DistributedError, match="connection was lost: GCS unreachable"):
            f.result(timeout=10)
    with pytest.raises(DistributedError, match="connection was lost"):
        controller.submit({"x": 0}, lambda v: v)
    controller.stop()


def test_stop_fails_open_requests_and_refuses_new_ones():
    controller = ChainController(FakeRay(), [Stage(1, stuck=True)], timeout_s=60, max_restarts=3)
    future = controller.submit({"x": 0}, lambda v: v)
    controller.stop()
    with pytest.raises(DistributedError, match="closed before this request finished"):
        future.result(timeout=10)
    with pytest.raises(DistributedError, match="closed"):
        controller.submit({"x": 0}, lambda v: v)
