"""Runs in flight on an AOT model: the resumable entry, the arena pool, PreemptibleRun's states.

These run on any build (OpenMP too): cancels before a run starts, after it ends, arenas taken and
given back. Cancels that land inside a kernel need Kiln's pool (tests/runtime/test_preemption.py)."""

import gc
import shutil

import numpy as np
import pytest

import kiln
from kiln.codegen.aot_source import RUN_FROM_ENTRY
from kiln.errors import InputError, KernelError, MemoryLimitError, RunStateError
from kiln.ir import sizes
from kiln.models import mlp
from kiln.runtime.arena_pool import ArenaPool
from kiln.runtime.run_handle import RunState

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")


@pytest.fixture(scope="module")
def model():
    cm = kiln.build(mlp(batch=2))
    x = np.random.default_rng(0).standard_normal(cm.inputs[0].shape).astype(np.float32)
    return cm, {cm.inputs[0].name: x}, cm.run({cm.inputs[0].name: x})


def test_entry_is_appended_and_runs_from_a_step(model):
    cm, feeds, want = model
    code = cm.library.source.code
    assert code.index(RUN_FROM_ENTRY) > code.index("kiln_model_profile")
    assert "kiln_run_enter_step" not in code  # an OpenMP build: no pool to tell
    h = cm.start(feeds)
    assert h.state is RunState.READY and h.step == 0
    r = h.run()
    assert not r.preempted and h.state is RunState.FINISHED
    assert all(np.array_equal(g, w) for g, w in zip(r.outputs, want))


def test_cancel_before_start_preempts_at_step_zero_and_resume_finishes(model):
    cm, feeds, want = model
    h = cm.start(feeds)
    h.cancel()
    r = h.run()
    assert r.preempted and r.preempted_at == 0 and r.outputs is None and h.state is RunState.PREEMPTED
    r = h.resume()
    assert not r.preempted and all(np.array_equal(g, w) for g, w in zip(r.outputs, want))


def test_cancel_after_finish_does_nothing_and_a_finished_run_does_not_run_again(model):
    cm, feeds, _ = model
    h = cm.start(feeds)
    h.run()
    h.cancel()
    assert h.state is RunState.FINISHED
    with pytest.raises(RunStateError, match="finished"):
        h.run()


def test_a_preempted_run_keeps_its_arena_until_closed(model):
    cm, feeds, _ = model
    pool = cm.runner.arena_pool
    before = pool.in_flight
    h = cm.start(feeds)
    h.cancel()
    h.run()
    assert pool.in_flight == before + 1
    h.close()
    assert pool.in_flight == before and h.state is RunState.CLOSED
    with pytest.raises(RunStateError, match="closed"):
        h.resume()


def test_a_dropped_run_gives_its_arena_back(model):
    cm, feeds, _ = model
    pool = cm.runner.arena_pool
    before = pool.in_flight
    h = cm.start(feeds)
    h.cancel()
    h.run()
    del h
    gc.collect()
    assert pool.in_flight == before


def test_a_preempted_run_reads_the_inputs_it_was_started_with(model):
    cm, feeds, want = model
    mine = {k: v.copy() for k, v in feeds.items()}
    h = cm.start(mine)
    h.cancel()
    h.run()
    for v in mine.values():
        v[...] = 7.0
    r = h.resume()
    assert all(np.array_equal(g, w) for g, w in zip(r.outputs, want))


def test_runs_in_flight_have_arenas_of_their_own_and_plain_runs_go_on(model):
    cm, feeds, want = model
    a, b = cm.start(feeds), cm.start(feeds)
    assert a._slot.arena.ctypes.data != b._slot.arena.ctypes.data
    assert all(np.array_equal(g, w) for g, w in zip(cm.run(feeds), want))  # a held arena blocks nothing
    a.close()
    b.close()


def test_a_freed_arena_is_reused(model):
    cm, feeds, _ = model
    h = cm.start(feeds)
    arena = h._slot.arena.ctypes.data
    h.close()
    h = cm.start(feeds)
    assert h._slot.arena.ctypes.data == arena
    h.close()


def test_one_more_arena_beyond_the_memory_limit_is_refused_before_running():
    """Under a memory limit every arena in flight counts: the third 4 KiB arena does not fit in 10 KiB."""
    pool = ArenaPool(4096, 1, 1)
    held = [pool.acquire(), pool.acquire()]
    with sizes.memory_limit(10240):
        with pytest.raises(MemoryLimitError, match=r"needs 4.0 KiB; with the 2 arena\(s\) of runs already in "
                                                   r"flight that is 12.0 KiB, and 10.0 KiB is the memory limit"):
            pool.acquire()
        assert pool.in_flight == 2
        pool.release(held.pop())
        held.append(pool.acquire())  # an idle arena costs nothing new
    for slot in held:
        pool.release(slot)


def test_the_model_memory_limit_bounds_the_arenas_in_flight(model):
    cm, feeds, _ = model
    pool = cm.runner.arena_pool
    held = [cm.start(feeds) for _ in range(5)]  # more than the pool keeps idle: the next arena is new
    cm.memory_limit = cm.runner.arena_bytes * pool.in_flight
    try:
        with pytest.raises(MemoryLimitError, match="memory limit"):
            cm.start(feeds)
    finally:
        cm.memory_limit = None
        for h in held:
            h.close()


def test_a_memory_limit_below_one_arena_refuses_a_start_as_it_refuses_a_run(model):
    cm, feeds, _ = model
    cm.start(feeds).close()  # an idle arena in the pool: a start would reuse it
    cm.memory_limit = 1024
    try:
        for call in (cm.run, cm.start):
            with pytest.raises(MemoryLimitError, match="the arena of intermediate tensors"):
                call(feeds)
    finally:
        cm.memory_limit = None


def test_wrong_inputs_are_refused_when_the_run_is_made(model):
    cm, feeds, _ = model
    name = next(iter(feeds))
    with pytest.raises(InputError, match=name):
        cm.start({name: np.zeros((3, 3), np.float32)})


def test_a_failing_kernel_names_it_and_gives_the_arena_back(model, monkeypatch):
    cm, feeds, want = model
    pool = cm.runner.arena_pool
    before = pool.in_flight
    monkeypatch.setattr(cm.runner, "_enter_from", lambda slot, start, stopped: _fail_at(stopped, 1))
    h = cm.start(feeds)
    with pytest.raises(KernelError, match=cm.runner.memory_report().order[1]):
        h.run()
    assert h.state is RunState.FAILED and pool.in_flight == before
    monkeypatch.undo()
    assert all(np.array_equal(g, w) for g, w in zip(cm.run(feeds), want))


def _fail_at(stopped, step: int) -> int:
    stopped.value = step
    return -2  # KILN_ERR_ALLOC


def test_graph_models_do_not_run_preemptibly():
    cm = kiln.build(mlp(batch=1), executor="graph")
    with pytest.raises(kiln.errors.AotError, match="graph"):
        cm.start({})


def test_a_library_without_the_resumable_entry_is_named(model, monkeypatch):
    cm, feeds, _ = model
    monkeypatch.setattr(cm.runner, "_run_from", None)
    with pytest.raises(kiln.errors.ArtifactError, match="kiln_model_run_from.*compile it again"):
        cm.start(feeds)
