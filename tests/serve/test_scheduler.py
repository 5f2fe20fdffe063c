"""The REEF-style scheduler: RT before BE with preemption at chunk checkpoints, limits, timeouts,
close, the FIFO baseline, and many mixed requests all answered as solo runs answer them."""

import shutil
import time
from concurrent.futures import wait

import numpy as np
import pytest

from kiln.errors import (
    InputError,
    QueueFullError,
    RequestTimeoutError,
    ServeError,
    ServerClosedError,
    UnknownModelError,
)
from kiln.serve.dispatch import InferRequest, ModelConfig, Priority
from kiln.serve.scheduler import BE_STOP_WAIT_S, ReefScheduler

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

RT = ModelConfig(priority=Priority.RT)
IN_FLIGHT_S = 0.01  # after its future says running, a BE run is on the cores by then (the chain takes 20+ ms)


@pytest.fixture
def sched():
    s = ReefScheduler()
    yield s
    s.close(drain=False)


def _running(future, timeout: float = 10.0) -> None:
    """Wait until the scheduler started `future`'s run."""
    end = time.perf_counter() + timeout
    while not future.running() and not future.done():
        assert time.perf_counter() < end, "the request never started"
        time.sleep(0.0002)


def _done_at(future) -> list[float]:
    at: list[float] = []
    future.add_done_callback(lambda f: at.append(time.perf_counter()))
    return at


def test_an_rt_request_preempts_a_running_be_run_which_then_completes_as_a_solo_run(sched, chain, small):
    (cm, cfeeds), (sm, sfeeds) = chain, small
    sched.add("be", cm, ModelConfig())
    sched.add("rt", sm, RT)
    fb = sched.submit(InferRequest("be", cfeeds(1)))
    be_at = _done_at(fb)
    _running(fb)
    time.sleep(IN_FLIGHT_S)
    fr = sched.submit(InferRequest("rt", sfeeds(2)))
    rt_at = _done_at(fr)
    assert np.array_equal(fr.result(10)[sm.outputs[0].name], sm.run(sfeeds(2))[0])
    assert np.array_equal(fb.result(10)["y"], cm.run(cfeeds(1))[0])
    assert rt_at[0] < be_at[0]
    stats = sched.stats()["be"]
    assert stats.preemptions == 1 and stats.preempt_latency_s.n == 1
    assert stats.requests == 1 and stats.failures == 0
    [t] = sched.preemption_traces()
    # the kernels stopped (the pool's stamp) before the BE lane got back into Python, and the RT run
    # started once they had stopped or it had waited BE_STOP_WAIT_S for them (None: the BE run was
    # back before the RT lane looked)
    assert t.arrival <= t.cancelled <= t.stopped <= t.returned
    assert t.rt_started is None or t.rt_started >= min(t.stopped, t.cancelled + BE_STOP_WAIT_S)
    assert sched.preemption_latencies() == [t.stopped - t.arrival]


def test_an_rt_request_cancels_the_be_run_before_its_feeds_are_checked(sched, chain, small):
    """The submitting thread cancels first thing; a malformed RT request then fails, and the BE run it
    stopped resumes and answers right."""
    (cm, cfeeds), (sm, _) = chain, small
    sched.add("be", cm, ModelConfig())
    sched.add("rt", sm, RT)
    fb = sched.submit(InferRequest("be", cfeeds(1)))
    _running(fb)
    time.sleep(IN_FLIGHT_S)
    with pytest.raises(InputError):
        sched.submit(InferRequest("rt", {"nope": np.zeros(1, np.float32)})).result(10)
    assert np.array_equal(fb.result(10)["y"], cm.run(cfeeds(1))[0])
    [t] = sched.preemption_traces()
    assert t.rt_started is None  # no RT run waited for it


def test_a_request_priority_overrides_its_models(sched, chain):
    cm, feeds = chain
    sched.add("m", cm, ModelConfig())
    fb = sched.submit(InferRequest("m", feeds(1)))
    be_at = _done_at(fb)
    _running(fb)
    time.sleep(IN_FLIGHT_S)
    fr = sched.submit(InferRequest("m", feeds(2), priority=Priority.RT))
    rt_at = _done_at(fr)
    wait([fb, fr], 20)
    assert rt_at[0] < be_at[0] and sched.stats()["m"].preemptions == 1
    assert np.array_equal(fb.result()["y"], cm.run(feeds(1))[0])


def test_rt_on_fewer_cores_than_the_machine_leaves_be_the_rest_and_both_answer_right(chain):
    """Padding: the BE run moves to the core RT leaves and goes on beside the RT runs, so it ends
    before the second of two RT runs of its own length (without padding it would wait for both)."""
    cm, feeds = chain
    s = ReefScheduler(cores=2)
    s.add("rt", cm, ModelConfig(priority=Priority.RT, cores=1))
    s.add("be", cm, ModelConfig())
    try:
        fb = s.submit(InferRequest("be", feeds(1)))
        be_at = _done_at(fb)
        _running(fb)
        time.sleep(IN_FLIGHT_S)
        rts = [s.submit(InferRequest("rt", feeds(i))) for i in (2, 3)]
        rt_at = _done_at(rts[1])
        for i, fr in zip((2, 3), rts):
            assert np.array_equal(fr.result(20)["y"], cm.run(feeds(i))[0])
        assert np.array_equal(fb.result(20)["y"], cm.run(feeds(1))[0])
        assert be_at[0] < rt_at[0] and s.stats()["be"].preemptions == 1
    finally:
        s.close()


def test_a_full_queue_refuses_with_queue_full(sched, chain, small):
    (cm, cfeeds), (sm, sfeeds) = chain, small
    sched.add("block", cm, ModelConfig())
    sched.add("m", sm, ModelConfig(queue_limit=2))
    _running(sched.submit(InferRequest("block", cfeeds(1))))
    futures = [sched.submit(InferRequest("m", sfeeds(i))) for i in range(3)]
    with pytest.raises(QueueFullError, match="'m' has 2 requests queued"):
        futures[2].result(10)
    assert all(f.result(10) for f in futures[:2])
    assert sched.stats()["m"].refused == 1


def test_a_request_still_queued_past_its_timeout_fails(sched, chain, small):
    (cm, cfeeds), (sm, sfeeds) = chain, small
    sched.add("block", cm, ModelConfig())
    sched.add("m", sm, ModelConfig(timeout_s=30.0))
    _running(sched.submit(InferRequest("block", cfeeds(1))))
    late = sched.submit(InferRequest("m", sfeeds(1), timeout_s=0.001))
    with pytest.raises(RequestTimeoutError, match="model 'm' waited"):
        late.result(10)
    stats = sched.stats()["m"]
    assert stats.timeouts == 1 and stats.failures == 1


def test_bad_feeds_fail_naming_the_input_and_unknown_models_fail(sched, small):
    sm, feeds = small
    sched.add("m", sm, ModelConfig())
    with pytest.raises(InputError, match="input 'input' has shape"):
        sched.submit(InferRequest("m", {"input": np.zeros((3, 64), np.float32)})).result(5)
    with pytest.raises(InputError, match="no input 'nope'"):
        sched.submit(InferRequest("m", {**feeds(1), "nope": np.zeros(1)})).result(5)
    with pytest.raises(InputError, match="no output 'z'"):
        sched.submit(InferRequest("m", feeds(1), outputs=["z"])).result(5)
    with pytest.raises(UnknownModelError, match="'other'"):
        sched.submit(InferRequest("other", feeds(1))).result(5)
    assert sched.stats()["m"].failures == 3


def test_settings_that_cannot_apply_are_refused(small):
    sm, _ = small
    s = ReefScheduler()
    try:
        with pytest.raises(ServeError, match="symbolic first dimension"):
            s.add("m", sm, ModelConfig(max_batch=4))
        with pytest.raises(ServeError, match="queue_limit"):
            s.add("m", sm, ModelConfig(queue_limit=0))
    finally:
        s.close()
    with pytest.raises(ServeError, match="cores=0"):
        ReefScheduler(cores=0)


def test_close_with_drain_answers_every_queued_request(chain):
    cm, feeds = chain
    s = ReefScheduler()
    s.add("m", cm, ModelConfig())
    futures = [s.submit(InferRequest("m", feeds(i))) for i in range(4)]
    s.close(drain=True)
    assert all(f.done() for f in futures)
    assert all(np.array_equal(f.result()["y"], cm.run(feeds(i))[0]) for i, f in enumerate(futures))
    with pytest.raises(ServerClosedError):
        s.submit(InferRequest("m", feeds(0))).result(5)


def test_close_without_drain_fails_the_queued_requests(chain):
    cm, feeds = chain
    s = ReefScheduler()
    s.add("m", cm, ModelConfig())
    first = s.submit(InferRequest("m", feeds(0)))
    _running(first)
    queued = [s.submit(InferRequest("m", feeds(i))) for i in range(1, 4)]
    s.close(drain=False)
    assert np.array_equal(first.result(5)["y"], cm.run(feeds(0))[0])
    for f in queued:
        with pytest.raises(ServerClosedError, match="shut down before this request ran"):
            f.result(5)


def test_remove_finishes_the_queue_then_refuses(sched, chain):
    cm, feeds = chain
    sched.add("m", cm, ModelConfig())
    futures = [sched.submit(InferRequest("m", feeds(i))) for i in range(3)]
    sched.remove("m")
    assert all(f.done() and not f.exception() for f in futures)
    with pytest.raises(UnknownModelError):
        sched.submit(InferRequest("m", feeds(0))).result(5)
    with pytest.raises(UnknownModelError):
        sched.remove("m")


def test_fifo_runs_in_arrival_order_and_preempts_nothing(chain, small):
    (cm, cfeeds), (sm, sfeeds) = chain, small
    s = ReefScheduler(fifo=True)
    s.add("be", cm, ModelConfig())
    s.add("rt", sm, RT)
    try:
        bes = [s.submit(InferRequest("be", cfeeds(i))) for i in range(3)]
        ats = [_done_at(f) for f in bes]
        fr = s.submit(InferRequest("rt", sfeeds(1)))
        rt_at = _done_at(fr)
        wait([*bes, fr], 30)
        assert rt_at[0] > max(a[0] for a in ats)
        assert s.stats()["be"].preemptions == 0
    finally:
        s.close()


def test_hundreds_of_mixed_rt_and_be_requests_all_answer_as_solo_runs(sched, chain, small):
    (cm, cfeeds), (sm, sfeeds) = chain, small
    sched.add("be", cm, ModelConfig(queue_limit=1000))
    sched.add("rt", sm, ModelConfig(priority=Priority.RT, queue_limit=1000))
    sched.add("small-be", sm, ModelConfig(queue_limit=1000))
    want_c = {i: cm.run(cfeeds(i))[0] for i in range(4)}
    want_s = {i: sm.run(sfeeds(i))[0] for i in range(10)}
    jobs = []
    for k in range(240):
        if k % 8 == 0:
            jobs.append((sched.submit(InferRequest("be", cfeeds(k % 4))), "y", want_c[k % 4]))
        else:
            name = "rt" if k % 2 else "small-be"
            time.sleep(0.0005 if name == "rt" else 0)
            jobs.append((sched.submit(InferRequest(name, sfeeds(k % 10))), sm.outputs[0].name, want_s[k % 10]))
    for f, out, want in jobs:
        assert np.array_equal(f.result(60)[out], want)
    stats = sched.stats()
    assert sum(s.requests for s in stats.values()) == 240 and sum(s.failures for s in stats.values()) == 0


def test_the_scheduler_imports_nothing_of_the_compiler_side():
    """Serving a compiled directory must not load the compiler (bench-serve builds inside functions)."""
    from tests.imports import KILN, compiler_side, imported_on_load

    roots = [KILN / "serve" / f for f in ("scheduler.py", "dispatch.py", "loadgen.py", "bench.py", "workloads.py")]
    assert compiler_side(imported_on_load(roots)) == []


def test_a_run_that_fails_fails_its_request_and_the_lanes_keep_serving(sched, chain):
    import dataclasses

    from kiln.errors import MemoryLimitError

    cm, feeds = chain
    sched.add("tight", dataclasses.replace(cm, memory_limit=1024), ModelConfig())
    sched.add("m", cm, ModelConfig())
    for _ in range(2):
        with pytest.raises(MemoryLimitError):
            sched.submit(InferRequest("tight", feeds(0), priority=Priority.RT)).result(10)
    assert np.array_equal(sched.submit(InferRequest("m", feeds(0), priority=Priority.RT)).result(10)["y"],
                          cm.run(feeds(0))[0])
    assert sched.stats()["tight"].failures == 2


def test_a_model_that_cannot_run_preemptibly_runs_whole_beside_rt_work(sched, batchable, small):
    """A symbolic-batch model runs on per-shape builds (Model.start raises AotError): it runs with
    Model.run and is never preempted."""
    (bm, bfeeds), (sm, sfeeds) = batchable, small
    sched.add("dyn", bm, ModelConfig())
    sched.add("rt", sm, RT)
    futures = [sched.submit(InferRequest("dyn", bfeeds(i, 3))) for i in range(3)]
    fr = sched.submit(InferRequest("rt", sfeeds(0)))
    assert np.array_equal(fr.result(20)[sm.outputs[0].name], sm.run(sfeeds(0))[0])
    for i, f in enumerate(futures):
        assert np.array_equal(f.result(20)[bm.outputs[0].name], bm.run(bfeeds(i, 3))[0])
    assert sched.stats()["dyn"].preemptions == 0
