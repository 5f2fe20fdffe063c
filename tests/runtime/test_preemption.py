"""Cancels that land inside kernels: a model built for Kiln's thread pool (-threading=kiln), cancelled
from another thread while it runs, stops at a chunk boundary and resumes to the outputs of an
uninterrupted run, bit for bit."""

import dataclasses
import shutil
import threading
import time

import numpy as np
import pytest

import kiln
from kiln.runtime.run_handle import RunState
from kiln.target import Target
from tests.helpers import matmul_chain

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")
LAYERS, ROWS, WIDTH = 16, 256, 512  # 16 GEMMs of 256x512x512: 2.1 GFLOP, tens of ms on two cores


@pytest.fixture(scope="module")
def chain():
    cm = kiln.build(matmul_chain(LAYERS, ROWS, WIDTH), target=dataclasses.replace(Target.host(), threading="kiln"))
    assert cm.executor == "aot"
    x = np.random.default_rng(1).standard_normal((ROWS, WIDTH)).astype(np.float32)
    return cm, {"x": x}, cm.run({"x": x})


def _cancel_after(run, seconds: float, started: threading.Event) -> threading.Thread:
    def cancel():
        started.wait()
        time.sleep(seconds)
        run.cancel()

    t = threading.Thread(target=cancel)
    t.start()
    return t


def test_the_resumable_entry_marks_every_step(chain):
    cm, _, _ = chain
    entry = cm.library.source.code.split("kiln_model_run_from(", 1)[1]
    steps = len(cm.runner.memory_report().order)
    assert [f"kiln_run_enter_step({i})" in entry for i in range(steps + 1)] == [True] * steps + [False]


def test_a_cancel_from_another_thread_preempts_and_resume_equals_the_uninterrupted_run(chain):
    cm, feeds, want = chain
    run, started = cm.start(feeds), threading.Event()
    t = _cancel_after(run, 0.002, started)
    started.set()
    r = run.run()
    t.join()
    assert r.preempted and 0 <= r.preempted_at < 2 * LAYERS and run.state is RunState.PREEMPTED
    assert run.step == r.preempted_at
    r = run.resume()
    assert not r.preempted and np.array_equal(r.outputs[0], want[0])


def test_a_run_preempted_many_times_still_equals_the_uninterrupted_run(chain):
    """Each cancel comes twice as late as the one before, so the run gets through even a launch that
    a resume runs again whole."""
    cm, feeds, want = chain
    run, stops, delay = cm.start(feeds), [], 0.0005
    while True:
        started = threading.Event()
        delay *= 2
        t = _cancel_after(run, delay, started)
        started.set()
        r = run.run()
        t.join()
        if not r.preempted:
            break
        stops.append(r.preempted_at)
    assert stops and stops == sorted(stops)
    assert np.array_equal(r.outputs[0], want[0])


def test_other_runs_of_the_model_go_on_while_one_is_stopped(chain):
    cm, feeds, want = chain
    run, started = cm.start(feeds), threading.Event()
    t = _cancel_after(run, 0.002, started)
    started.set()
    assert run.run().preempted
    t.join()
    assert np.array_equal(cm.run(feeds)[0], want[0])  # on another arena
    other = {"x": np.ones_like(feeds["x"])}
    assert np.array_equal(cm.start(other).run().outputs[0], cm.run(other)[0])
    assert np.array_equal(run.resume().outputs[0], want[0])


def test_a_closed_run_leaves_its_arena_fit_for_the_next_run(chain):
    """A run dropped mid-way leaves half-written tensors in its arena; the next run (which takes that
    arena: the pool hands out the one freed last) writes each before reading it."""
    cm, feeds, want = chain
    run, started = cm.start(feeds), threading.Event()
    t = _cancel_after(run, 0.002, started)
    started.set()
    assert run.run().preempted
    t.join()
    arena = run._slot.arena.ctypes.data
    run.close()
    again = cm.start(feeds)
    assert again._slot.arena.ctypes.data == arena
    assert np.array_equal(again.run().outputs[0], want[0])


def test_a_session_run_is_preempted_on_the_session_cores(chain):
    cm, feeds, want = chain
    session = kiln.InferenceSession(cm, threads=1)
    run, started = session.start(feeds), threading.Event()
    t = _cancel_after(run, 0.002, started)
    started.set()
    r = run.run()
    t.join()
    assert r.preempted and np.array_equal(run.resume().outputs[0], want[0])
    assert np.array_equal(session.run(None, feeds)[0], want[0])


def test_a_saved_model_loads_preemptible(chain, tmp_path):
    cm, feeds, want = chain
    session = kiln.load(cm.export(tmp_path / "chain"))
    run, started = session.start(feeds), threading.Event()
    t = _cancel_after(run, 0.002, started)
    started.set()
    r = run.run()
    t.join()
    assert r.preempted and np.array_equal(run.resume().outputs[0], want[0])


def test_the_kernels_check_for_a_cancel_inside_their_chunks(chain):
    cm, _, _ = chain
    assert "__atomic_load_n(kiln_ctl->cancel, __ATOMIC_RELAXED)) { kiln_ctl->stopped_at = " in cm.library.source.code


def test_cancels_at_random_times_resume_to_the_same_outputs(chain):
    """Cancels anywhere in the run (between kernels, between chunks, at checkpoints inside chunks):
    every run, resumed as often as it is stopped, ends with the uninterrupted run's outputs."""
    cm, feeds, want = chain
    t0 = time.perf_counter()
    cm.run(feeds)
    whole = time.perf_counter() - t0
    rng = np.random.default_rng(7)
    preempted = 0
    for _ in range(12):
        run = cm.start(feeds)
        while True:
            started = threading.Event()
            t = _cancel_after(run, float(rng.uniform(0.0, whole)), started)
            started.set()
            r = run.run()
            t.join()
            if not r.preempted:
                break
            preempted += 1
        assert np.array_equal(r.outputs[0], want[0])
    assert preempted


def test_another_thread_learns_from_the_pool_when_the_kernels_stopped(chain):
    """wait_stopped answers with the moment the kernels stopped, which is after the cancel and no
    later than run() returning; over, the run answers None."""
    cm, feeds, want = chain
    run, started, seen = cm.start(feeds), threading.Event(), []

    def cancel_and_wait() -> None:
        started.wait()
        time.sleep(0.002)
        seen.append(time.perf_counter())
        run.cancel()
        seen.append(run.wait_stopped(10.0))

    t = threading.Thread(target=cancel_and_wait)
    t.start()
    started.set()
    r = run.run()
    returned = time.perf_counter()
    t.join()
    asked, stopped = seen
    assert r.preempted and stopped is not None and asked <= stopped <= returned
    assert run.wait_stopped(0.0) == stopped  # stopped: answered at once, with the same time
    assert np.array_equal(run.resume().outputs[0], want[0])
    assert run.wait_stopped(0.0) is None
