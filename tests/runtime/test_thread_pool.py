"""The process-wide runtime (kiln.runtime.thread_pool): settings from Python, the environment and the
CLI, refused with the value named; partitions handed to sessions; models equal under both threadings."""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest

import kiln
from kiln.cli import main
from kiln.errors import KernelError, KilnError
from kiln.models import bert_tiny, mlp, small_cnn
from kiln.runtime import thread_pool
from kiln.runtime.thread_pool import Partition, Runtime, RuntimeConfig, running
from kiln.target import Target

KILN, OPENMP = Target.parse("c -threading=kiln"), Target.parse("c -threading=openmp")


@pytest.fixture
def fresh_runtime(monkeypatch):
    """A runtime of its own for the test (the process's is restored after, and re-applied at its next run)."""
    rt = Runtime(RuntimeConfig(cores=4))
    monkeypatch.setattr(thread_pool, "_runtime", rt)
    return rt


@pytest.mark.parametrize(("changes", "named"), [({"cores": 0}, "cores=0"), ({"cores": -2}, "cores=-2"),
                                                ({"cores": 1.5}, "cores=1.5"), ({"spin_us": -1}, "spin_us=-1"),
                                                ({"pin": "yes"}, "pin='yes'")])
def test_bad_settings_are_refused_with_the_value(fresh_runtime, changes, named):
    with pytest.raises(KilnError, match=named):
        kiln.configure_runtime(**changes)
    assert fresh_runtime.config == RuntimeConfig(cores=4)


@pytest.mark.parametrize(("env", "named"), [({"KILN_CORES": "0"}, "cores=0"), ({"KILN_CORES": "many"}, "KILN_CORES"),
                                            ({"KILN_SPIN_US": "-5"}, "spin_us=-5"), ({"KILN_PIN": "maybe"}, "KILN_PIN")])
def test_bad_environment_settings_are_refused_with_the_value(env, named):
    with pytest.raises(KilnError, match=named):
        RuntimeConfig.from_env(env)


def test_settings_from_the_environment():
    assert RuntimeConfig.from_env({"KILN_CORES": "3", "KILN_SPIN_US": "0", "KILN_PIN": "1"}) == RuntimeConfig(3, 0, True)
    assert RuntimeConfig.from_env({}).spin_us == thread_pool.DEFAULT_SPIN_US


def test_unknown_threading_is_refused_with_the_value(monkeypatch):
    with pytest.raises(KilnError, match="-threading=tbb: unknown threading mode; the modes are openmp, kiln"):
        Target.parse("c -threading=tbb")
    assert Target.parse(str(KILN)) == KILN and KILN.key != OPENMP.key


def test_configure_reaches_the_pool(fresh_runtime):
    kiln.configure_runtime(cores=3, spin_us=7)
    assert fresh_runtime.pool().kiln_pool_cores() == 3
    kiln.configure_runtime(cores=4)
    assert fresh_runtime.pool().kiln_pool_cores() == 4


def test_cli_global_options_configure_the_runtime(fresh_runtime, capsys):
    assert main(["--cores", "0", "demo"]) == 2
    assert "cores=0" in capsys.readouterr().err


def test_partitions_are_disjoint_while_the_cores_allow(fresh_runtime):
    parts = [fresh_runtime.acquire(t) for t in (1, 2, 1)]
    assert parts == [Partition(0, 1), Partition(1, 2), Partition(3, 1)]
    assert fresh_runtime.acquire(2) == Partition(0, 2)  # all taken: the least shared range
    fresh_runtime.release(parts[1])
    assert fresh_runtime.acquire(None) == Partition(0, 4)
    assert fresh_runtime.acquire(9) == Partition(0, 4)


def test_sessions_hold_partitions_until_they_go(fresh_runtime):
    cm = kiln.build(mlp(batch=1), target=KILN)
    a, b = kiln.InferenceSession(cm, threads=2), kiln.InferenceSession(cm, threads=2)
    assert {a.partition, b.partition} == {Partition(0, 2), Partition(2, 2)}
    del a
    assert kiln.InferenceSession(cm, threads=1).partition == Partition(0, 1)
    assert kiln.InferenceSession(kiln.build(mlp(batch=1), target=OPENMP), threads=1).partition is None


def test_nested_running_blocks_keep_the_outer_partition(fresh_runtime):
    with running(Partition(2, 2)):
        with running():
            assert thread_pool._bound.depth == 2
    assert thread_pool._bound.depth == 0


def _feeds(cm) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {p.name: rng.standard_normal(shape).astype(p.type.dtype) if "float" in p.type.dtype
            else rng.integers(0, 100, shape).astype(p.type.dtype)  # token ids
            for p in cm.mod.main.params for shape in [[int(d) for d in p.type.shape]]}


@pytest.mark.parametrize(("model", "executor"), [(mlp, "aot"), (mlp, "graph"), (small_cnn, "aot"),
                                                 (bert_tiny, "aot")])
def test_models_give_the_same_outputs_under_both_threadings(model, executor):
    built = {t: kiln.build(model(batch=2), target=t, executor=executor) for t in (OPENMP, KILN)}
    feeds = _feeds(built[OPENMP])
    want = built[OPENMP].run(feeds)
    for threads in (1, 2):
        got = kiln.InferenceSession(built[KILN], threads=threads).run(None, feeds)
        for w, g in zip(want, got):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_two_threads_run_their_sessions_at_once(fresh_runtime):
    cm = kiln.build(small_cnn(batch=1), target=KILN)
    feeds = _feeds(cm)
    want = cm.run(feeds)[0]
    sessions = [kiln.InferenceSession(cm, threads=1), kiln.InferenceSession(kiln.build(small_cnn(batch=1), target=KILN),
                                                                           threads=1)]
    assert sessions[0].partition != sessions[1].partition
    bad: list[float] = []

    def drive(s) -> None:
        for _ in range(20):
            got = s.run(None, feeds)[0]
            if not np.allclose(got, want, rtol=1e-5, atol=1e-6):
                bad.append(float(np.abs(got - want).max()))

    threads = [threading.Thread(target=drive, args=(s,)) for s in sessions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


def test_running_binds_a_given_run_block(fresh_runtime):
    """A caller's own run block (as a preemptible run will hold) is what the executor's launches check."""
    cm = kiln.build(mlp(batch=1), target=KILN)
    feeds = _feeds(cm)
    pool = fresh_runtime.pool()
    run = ctypes.c_void_p(pool.kiln_run_new())
    try:
        with running(Partition(0, 2), run=run):
            pool.kiln_run_cancel(run)
            with pytest.raises(KernelError, match="error code 1"):  # KILN_PREEMPTED, until the preempt API
                cm.run(feeds)
        with running(Partition(0, 2), run=run):  # a new begin clears the cancel
            np.testing.assert_allclose(cm.run(feeds)[0], kiln.build(mlp(batch=1), target=OPENMP).run(feeds)[0],
                                       rtol=1e-5, atol=1e-6)
    finally:
        pool.kiln_run_free(run)
