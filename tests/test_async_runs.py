"""Asynchronous runs: InferenceSession.run_async / run_asyncio and CompiledModel.run_async."""

import asyncio
import dataclasses
import shutil
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import pytest

import kiln
from kiln.errors import InputError
from kiln.models import mlp, small_cnn
from kiln.target import Target

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")


def _feeds(session, seed):
    rng = np.random.default_rng(seed)
    return {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in session.get_inputs()}


@pytest.fixture(scope="module")
def sessions():
    """Compiled before the tests (wait_for_compile): runs compare bit for bit, so all on one tier."""
    return [kiln.InferenceSession(mlp(batch=2), wait_for_compile=True),
            kiln.InferenceSession(small_cnn(batch=1), wait_for_compile=True)]


def test_run_async_from_eight_threads_on_two_models_equals_sequential_runs(sessions):
    jobs = [(s, _feeds(s, seed)) for seed in range(4) for s in sessions]
    want = [s.run(None, f) for s, f in jobs]
    got: list = [None] * len(jobs)

    def submit(i):
        s, f = jobs[i]
        got[i] = s.run_async(None, f)

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(isinstance(f, Future) for f in got)
    for fut, w in zip(got, want):
        outs = fut.result(timeout=120)
        assert len(outs) == len(w) and all(np.array_equal(a, b) for a, b in zip(outs, w))


def test_runs_on_kiln_pool_partitions_from_many_threads_equal_sequential_runs():
    """Built for Kiln's pool, each session on a partition of its own: every worker thread binds it."""
    target = dataclasses.replace(Target.host(), threading="kiln")
    pair = [kiln.InferenceSession(kiln.build(m, target=target), threads=1) for m in (mlp(batch=2), small_cnn(batch=1))]
    jobs = [(s, _feeds(s, seed)) for seed in range(4) for s in pair]
    want = [s.run(None, f) for s, f in jobs]
    with ThreadPoolExecutor(8) as callers:
        futures = list(callers.map(lambda job: job[0].run_async(None, job[1]), jobs))
    for fut, w in zip(futures, want):
        assert all(np.array_equal(a, b) for a, b in zip(fut.result(timeout=120), w))


def test_run_asyncio_equals_run(sessions):
    feeds = [(s, _feeds(s, 9)) for s in sessions]

    async def main():
        return await asyncio.gather(*(s.run_asyncio(None, f) for s, f in feeds))

    for outs, (s, f) in zip(asyncio.run(main()), feeds):
        assert all(np.array_equal(a, b) for a, b in zip(outs, s.run(None, f)))


def test_output_names_select_as_in_run(sessions):
    s = sessions[0]
    feeds = _feeds(s, 3)
    name = s.get_outputs()[0].name
    (out,) = s.run_async([name], feeds).result(timeout=60)
    assert np.array_equal(out, s.run([name], feeds)[0])
    with pytest.raises(InputError, match="nope"):
        s.run_async(["nope"], feeds).result(timeout=60)


def test_a_wrong_input_fails_its_own_request_only(sessions):
    s = sessions[1]
    good = [_feeds(s, seed) for seed in range(6)]
    want = [s.run(None, f) for f in good]
    name = s.get_inputs()[0].name
    futures = [s.run_async(None, f) for f in good[:3]]
    bad = s.run_async(None, {name: np.zeros((1, 2), np.float32)})
    futures += [s.run_async(None, f) for f in good[3:]]
    with pytest.raises(InputError, match=name):
        bad.result(timeout=60)
    for fut, w in zip(futures, want):
        assert all(np.array_equal(a, b) for a, b in zip(fut.result(timeout=120), w))
    assert all(np.array_equal(a, b) for a, b in zip(s.run(None, good[0]), want[0]))


def test_compiled_model_run_async_and_graph_models():
    cm = kiln.build(mlp(batch=1), executor="graph")
    feeds = {i.name: np.ones(i.shape, np.float32) for i in cm.inputs}
    futures = [cm.run_async(feeds) for _ in range(4)]
    want = cm.run(feeds)
    for fut in futures:
        assert all(np.array_equal(a, b) for a, b in zip(fut.result(timeout=60), want))
