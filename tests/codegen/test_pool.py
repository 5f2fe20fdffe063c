"""Kiln's thread pool in C, driven through ctypes with the tasks of pool/pool_tasks.c: chunking covers
every iteration once, errors and cancels stop launches, a resumed launch skips its finished chunks,
partitions keep to their workers, and launches from several threads at once do not mix."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from kiln.codegen import pool_library
from kiln.codegen.compiler import CompilerNotFoundError, compile_shared
from kiln.target import find_compiler

from .conftest import requires_gcc

pytestmark = requires_gcc
TASKS = Path(__file__).with_name("pool") / "pool_tasks.c"
PREEMPTED, RESUMABLE = 1, 1
POOL_CORES = 4  # more workers than this machine may have CPUs: correctness does not depend on them


class Counter(ctypes.Structure):
    _fields_ = [("hits", ctypes.c_void_p), ("tids", ctypes.c_void_p), ("chunks", ctypes.c_void_p),
                ("fail_at", ctypes.c_int64), ("fail_code", ctypes.c_int32), ("cancel_at", ctypes.c_int64),
                ("run", ctypes.c_void_p), ("inner", ctypes.c_int64), ("checks", ctypes.c_int32)]


class Tasks:
    """The test tasks' library, and arrays a launch of n iterations records into."""

    def __init__(self, lib: ctypes.CDLL):
        self.lib = lib
        for name, args in (("count_launch", [ctypes.POINTER(Counter), ctypes.c_int64, ctypes.c_int64, ctypes.c_int32]),
                           ("nest_launch", [ctypes.POINTER(Counter), ctypes.c_int64])):
            getattr(lib, name).argtypes, getattr(lib, name).restype = args, ctypes.c_int32
        lib.thread_id.restype = ctypes.c_int64

    def counter(self, n: int, *, fail_at: int = -1, fail_code: int = 0, cancel_at: int = -1, run=None,
                inner: int = 0, checks: bool = False) -> tuple[Counter, dict[str, np.ndarray]]:
        arrays = {"hits": np.zeros(max(n, 1), np.int32), "tids": np.zeros(max(n, 1), np.int64),
                  "chunks": np.zeros(1, np.int32)}
        c = Counter(*(a.ctypes.data for a in arrays.values()), fail_at, fail_code, cancel_at, run, inner, checks)
        return c, arrays

    def launch(self, c: Counter, n: int, grain: int, flags: int = 0) -> int:
        return self.lib.count_launch(ctypes.byref(c), n, grain, flags)


@pytest.fixture(scope="module")
def pool():
    lib = pool_library.load()
    before = lib.kiln_pool_cores()
    assert lib.kiln_pool_configure(POOL_CORES, 25, 0) == 0
    yield lib
    lib.kiln_pool_configure(before, 25, 0)


@pytest.fixture(scope="module")
def tasks(pool, tmp_path_factory) -> Tasks:
    out = tmp_path_factory.mktemp("pool-tasks") / "pool_tasks.so"
    compile_shared(TASKS, out, find_compiler("gcc"),
                   ("-O2", "-fPIC", "-shared", "-std=gnu11", f"-I{pool_library.HEADER.parent}"))
    return Tasks(ctypes.CDLL(str(out)))


class Bound:
    """A run bound to the calling thread with a partition, for a with-block."""

    def __init__(self, pool, first: int, num: int, run=None):
        self.pool, self.first, self.num = pool, first, num
        self.run = run or pool.kiln_run_new()
        self.owned = run is None

    def __enter__(self):
        self.pool.kiln_run_begin(self.run, self.first, self.num)
        return self.run

    def __exit__(self, *exc):
        self.pool.kiln_run_end()
        if self.owned:
            self.pool.kiln_run_free(self.run)


@pytest.mark.parametrize("cores", [1, 2, POOL_CORES])
@pytest.mark.parametrize("grain", [0, 1, 3, 7, 10 ** 9])
def test_every_iteration_runs_once(pool, tasks, cores, grain):
    for n in (0, 1, 2, 3, 5, 13, 31, 97, 1009):
        c, a = tasks.counter(n)
        with Bound(pool, 0, cores):
            assert tasks.launch(c, n, grain) == 0
        assert (a["hits"][:n] == 1).all(), (n, grain, cores)
        # dynamic: ceil(n / grain) chunks, at most 16 per core, rounded up to a multiple of the cores
        # (balance), at most n
        chunks = min(n, _ceil(min(_ceil(n, grain), 16 * cores), cores) * cores) if grain else min(n, cores)
        assert a["chunks"][0] == chunks


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def test_without_a_run_the_caller_runs_everything_at_once(pool, tasks):
    c, a = tasks.counter(101)
    assert tasks.launch(c, 101, 1) == 0
    assert (a["hits"] == 1).all() and a["chunks"][0] == 1
    assert (a["tids"] == tasks.lib.thread_id()).all()


def test_a_nested_launch_runs_inside_its_chunk(pool, tasks):
    outer, inner = 8, 5
    c, a = tasks.counter(outer * inner, inner=inner)
    with Bound(pool, 0, POOL_CORES):
        assert tasks.lib.nest_launch(ctypes.byref(c), outer) == 0
    assert (a["hits"] == 1).all()
    assert a["chunks"][0] == outer  # one inner chunk per outer iteration: serial, not split
    tids = a["tids"].reshape(outer, inner)
    assert (tids == tids[:, :1]).all()


@pytest.mark.parametrize("cores", [1, 2])
def test_the_first_error_wins_and_later_chunks_do_not_start(pool, tasks, cores):
    c, a = tasks.counter(1600, fail_at=700, fail_code=-9)  # 16 chunks of 100: iteration 700 is chunk 7's
    with Bound(pool, 0, cores):
        assert tasks.launch(c, 1600, 100) == -9
    assert a["hits"][700] == 1
    assert a["chunks"][0] <= 8 + cores  # at most the chunks in flight when chunk 7 failed
    if cores == 1:
        assert a["chunks"][0] == 8


def test_cancel_preempts_and_a_resumable_launch_skips_its_finished_chunks(pool, tasks):
    run = pool.kiln_run_new()
    try:
        first, fa = tasks.counter(10)
        second, sa = tasks.counter(200, cancel_at=42, run=run)
        with Bound(pool, 0, 2, run):
            pool.kiln_run_enter_step(3)
            assert tasks.launch(first, 10, 1) == 0
            assert tasks.launch(second, 200, 4, RESUMABLE) == PREEMPTED
        done = int((sa["hits"] == 1).sum())
        assert 44 <= done < 200 and (sa["hits"][:done] == 1).all() and (sa["hits"][done:] == 0).all()
        second.cancel_at = -1
        with Bound(pool, 0, 2, run):
            pool.kiln_run_enter_step(3)
            assert tasks.launch(first, 10, 1) == 0  # an earlier launch re-runs in full (its scratch is gone)
            assert tasks.launch(second, 200, 4, RESUMABLE) == 0
        assert (fa["hits"] == 2).all()
        assert (sa["hits"] == 1).all()  # the finished chunks did not run again
        with Bound(pool, 0, 2, run):  # the step completed: the record is gone
            pool.kiln_run_enter_step(3)
            assert tasks.launch(first, 10, 1) == 0 and tasks.launch(second, 200, 4, RESUMABLE) == 0
        assert (sa["hits"] == 2).all()
    finally:
        pool.kiln_run_free(run)


def test_a_checkpoint_inside_a_chunk_stops_it_and_the_resume_starts_where_it_stopped(pool, tasks):
    """One core, chunks of 10: the cancel at iteration 42 is seen inside chunk 4 (iterations 40..49),
    which stops after 42 and says so; the resume runs iterations 43.. only."""
    run = pool.kiln_run_new()
    try:
        c, a = tasks.counter(100, cancel_at=42, run=run, checks=True)
        with Bound(pool, 0, 1, run):
            pool.kiln_run_enter_step(0)
            assert tasks.launch(c, 100, 10, RESUMABLE) == PREEMPTED
        assert (a["hits"][:43] == 1).all() and (a["hits"][43:] == 0).all()
        c.cancel_at = -1
        with Bound(pool, 0, 1, run):
            pool.kiln_run_enter_step(0)
            assert tasks.launch(c, 100, 10, RESUMABLE) == 0
        assert (a["hits"] == 1).all()
    finally:
        pool.kiln_run_free(run)


def test_a_run_preempted_at_every_iteration_still_moves_on(pool, tasks):
    """Each resume is cancelled in its first iteration on two cores: every resume still keeps the
    iterations that finished, so the launch ends, each iteration run at most a few times."""
    run = pool.kiln_run_new()
    try:
        n = 64
        c, a = tasks.counter(n, run=run, checks=True)
        resumes = 0
        while True:
            done = int((a["hits"] > 0).sum())
            c.cancel_at = done if done < n else -1
            with Bound(pool, 0, 2, run):
                pool.kiln_run_enter_step(0)
                if tasks.launch(c, n, 4, RESUMABLE) == 0:
                    break
            resumes += 1
            assert resumes <= n
        assert (a["hits"] >= 1).all() and a["hits"].max() <= 3
    finally:
        pool.kiln_run_free(run)


@pytest.mark.parametrize("cores", [1, 2, POOL_CORES])
def test_checkpoints_inside_chunks_stop_every_worker(pool, tasks, cores):
    run = pool.kiln_run_new()
    try:
        c, a = tasks.counter(4000, cancel_at=100, run=run, checks=True)
        with Bound(pool, 0, cores, run):
            assert tasks.launch(c, 4000, 1000, RESUMABLE) == PREEMPTED
        assert 101 <= int(a["hits"].sum()) < 4000  # every chunk stopped at its next iteration
    finally:
        pool.kiln_run_free(run)


def test_a_step_boundary_is_a_checkpoint(pool):
    run = pool.kiln_run_new()
    try:
        with Bound(pool, 0, 1, run):
            assert pool.kiln_run_enter_step(0) == 0
            pool.kiln_run_cancel(run)
            assert pool.kiln_run_enter_step(1) == PREEMPTED
        with Bound(pool, 0, 1, run):  # a fresh begin clears the cancel
            assert pool.kiln_run_enter_step(1) == 0
    finally:
        pool.kiln_run_free(run)
    assert pool.kiln_run_enter_step(0) == 0  # no run bound: nothing to stop


def test_a_waiter_learns_when_and_that_a_run_stopped(pool, tasks):
    run = pool.kiln_run_new()
    try:
        assert pool.kiln_run_wait(run, 0) > 0  # not begun: stopped
        n, rc = 2_000_000, []
        c, a = tasks.counter(n, run=run, checks=True)

        def drive() -> None:
            with Bound(pool, 0, 2, run):
                rc.append(tasks.launch(c, n, 1000, RESUMABLE))

        t = threading.Thread(target=drive)
        t.start()
        while not a["hits"][0]:
            time.sleep(0.001)
        assert pool.kiln_run_wait(run, 1000) == 0  # still running after a millisecond
        asked = time.perf_counter()
        pool.kiln_run_cancel(run)
        stopped = pool.kiln_run_wait(run, 10_000_000) * 1e-9  # the clock of time.perf_counter
        t.join()
        assert rc == [PREEMPTED] and asked <= stopped <= time.perf_counter()
        assert int(a["hits"].sum()) < n
    finally:
        pool.kiln_run_free(run)


@pytest.mark.parametrize("change", ["not resumable", "other size", "other step"])
def test_a_resume_reruns_the_whole_launch_when_it_cannot_skip(pool, tasks, change):
    run = pool.kiln_run_new()
    try:
        c, a = tasks.counter(100, cancel_at=10, run=run)  # 10 chunks of 10
        flags = 0 if change == "not resumable" else RESUMABLE
        with Bound(pool, 0, 1, run):
            pool.kiln_run_enter_step(0)
            assert tasks.launch(c, 100, 10, flags) == PREEMPTED
        assert (a["hits"][:20] == 1).all() and (a["hits"][20:] == 0).all()
        c.cancel_at = -1
        n = 99 if change == "other size" else 100
        with Bound(pool, 0, 1, run):
            pool.kiln_run_enter_step(1 if change == "other step" else 0)
            assert tasks.launch(c, n, 10, flags) == 0
        assert (a["hits"][:20] == 2).all() and (a["hits"][20:n] == 1).all()
    finally:
        pool.kiln_run_free(run)


def test_a_resume_on_another_partition_skips_the_finished_iterations(pool, tasks):
    """What a record keeps is iterations, not chunks: a run stopped on one core resumes on four."""
    run = pool.kiln_run_new()
    try:
        c, a = tasks.counter(100, cancel_at=10, run=run)
        with Bound(pool, 0, 1, run):
            pool.kiln_run_enter_step(0)
            assert tasks.launch(c, 100, 10, RESUMABLE) == PREEMPTED
        c.cancel_at = -1
        with Bound(pool, 0, POOL_CORES, run):
            pool.kiln_run_enter_step(0)
            assert tasks.launch(c, 100, 10, RESUMABLE) == 0
        assert (a["hits"] == 1).all()
    finally:
        pool.kiln_run_free(run)


def test_a_cancel_before_the_launch_stops_it_before_any_chunk(pool, tasks):
    c, a = tasks.counter(50)
    with Bound(pool, 0, 2) as run:
        pool.kiln_run_cancel(run)
        assert tasks.launch(c, 50, 1) == PREEMPTED
    assert a["chunks"][0] == 0
    with Bound(pool, 0, 2):  # a fresh begin clears a cancel not seen yet
        assert tasks.launch(c, 50, 1) == 0


def test_partitions_run_on_their_own_workers(pool, tasks):
    """Two threads with partitions {0, 1} and {2, 3}: each launch's iterations run on its caller or on
    the one worker of its partition, and the two sets of threads never meet."""
    seen: dict[int, set[int]] = {0: set(), 2: set()}

    def drive(first: int) -> None:
        with Bound(pool, first, 2):
            for _ in range(50):
                c, a = tasks.counter(64)
                assert tasks.launch(c, 64, 1) == 0
                assert (a["hits"] == 1).all()
                seen[first] |= set(a["tids"].tolist())

    threads = [threading.Thread(target=drive, args=(f,)) for f in seen]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert 1 <= len(seen[0]) <= 2 and 1 <= len(seen[2]) <= 2
    assert not seen[0] & seen[2]


@pytest.mark.parametrize("grain", [0, 3])
def test_many_launches_from_two_threads_on_one_partition(pool, tasks, grain):
    """Overlapping partitions (more sessions than cores) share workers without losing iterations."""
    failures: list[str] = []

    def drive(k: int) -> None:
        with Bound(pool, 0, POOL_CORES):
            for i in range(300):
                n = 1 + (i * 7 + k) % 97
                c, a = tasks.counter(n)
                if tasks.launch(c, n, grain) != 0 or not (a["hits"] == 1).all():
                    failures.append(f"thread {k} launch {i}: {a['hits'].tolist()}")

    threads = [threading.Thread(target=drive, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


def test_configure_refuses_bad_values(pool):
    assert pool.kiln_pool_configure(0, 25, 0) < 0
    assert pool.kiln_pool_configure(4, -1, 0) < 0
    assert pool.kiln_pool_cores() == POOL_CORES
    assert pool.kiln_pool_abi() == pool_library.ABI


_LOAD = """
import sys
from kiln.codegen import pool_library
from kiln.errors import KilnError
try:
    pool_library.load(sys.argv[1])
except KilnError as e:
    print(e)
"""


def test_a_pool_of_another_abi_is_refused(tmp_path):
    src, lib = tmp_path / "old_pool.c", tmp_path / "old_pool.so"
    src.write_text("#include <stdint.h>\nint32_t kiln_pool_abi(void) { return 99; }\n")
    compile_shared(src, lib, find_compiler("gcc"), ("-O2", "-fPIC", "-shared"))
    proc = subprocess.run([sys.executable, "-c", _LOAD, str(lib)], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert f"{lib} has ABI version 99; this Kiln needs {pool_library.ABI}" in proc.stdout, proc.stderr


def test_building_the_pool_without_the_compiler_names_it():
    with pytest.raises(CompilerNotFoundError, match="'no-such-cc' not found"):
        pool_library.build("no-such-cc")
