"""The dataflow executor: independent branches of a model run at the same time, each on part of the cores.

The compiler (kiln.compiler.aot with kiln.compiler.dataflow_choice) groups the kernel calls into
tasks (chains of calls with nothing to wait for in between) and plans an arena in which the
tensors of calls that can run at once never share bytes (kiln.compiler.concurrent_memory). A run
puts the tasks whose inputs are ready on a ready queue, highest priority (longest predicted rest of
the run) first; a small crew of threads takes them. A task is one ctypes call, `kiln_model_steps`,
that runs its calls in C; ctypes releases the GIL during it, so the only Python between kernels is
the ready queue's bookkeeping.

Each worker's kernels parallelize over its own share of the cores. With OpenMP threading that is
its thread count (OpenMP keeps it per calling thread), and the calling thread is one of the crew.
With Kiln threading (target -threading=kiln) it is a partition of the process's pool
(kiln.runtime.thread_pool) each worker holds for its lifetime; a launch uses the partition its
thread bound, and a caller inside a session's binding keeps the session's, so there the crew is all
worker threads and the caller only waits.
"""

from __future__ import annotations

import ctypes
import heapq
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from kiln.codegen import openmp_env
from kiln.codegen.aot_abi import COPY_ENTRY, STEPS_ENTRY
from kiln.ir.module import IRModule
from kiln.runtime.aot_executor import AotExecutor, MemoryReport
from kiln.runtime.thread_pool import Partition, running, runtime


@dataclass(frozen=True)
class DataflowSchedule:
    """What the crew runs: tasks (step indices in entry order), the tasks each waits for, a priority
    per task (higher first) and how the cores are split."""

    tasks: tuple[tuple[int, ...], ...]
    deps: tuple[tuple[int, ...], ...]
    priority: tuple[float, ...]
    workers: int
    cores_per_worker: int
    note: str = ""  # the cost model's prediction, for reports
    threading: str = "openmp"  # the kernels' (the target's -threading): how a worker gets its cores


class _Run:
    """One run's state, shared by the crew under the crew's condition variable."""

    def __init__(self, schedule: DataflowSchedule, args: tuple[Any, ...]):
        self.args = args
        self.waiting = [len(d) for d in schedule.deps]
        self.ready = [(-schedule.priority[k], k) for k, w in enumerate(self.waiting) if w == 0]
        heapq.heapify(self.ready)
        self.remaining = len(schedule.tasks)
        self.in_flight = 0
        self.error: tuple[int, int] | None = None  # (return code, failed step)
        self.abandoned = False  # the caller was interrupted: hand out no more tasks

    @property
    def over(self) -> bool:
        return self.remaining == 0 or self.error is not None or self.abandoned


class _Crew:
    """The worker threads and the ready queue. Holds no reference to its executor, so an executor
    that is dropped stops its threads (see DataflowExecutor.__del__)."""

    def __init__(self, library: Any, schedule: DataflowSchedule):
        self.schedule = schedule
        self.users: list[list[int]] = [[] for _ in schedule.tasks]
        for k, ds in enumerate(schedule.deps):
            for d in ds:
                self.users[d].append(k)
        self.steps = [(ctypes.c_int32 * len(t))(*t) for t in schedule.tasks]
        self.entry = getattr(library.lib, STEPS_ENTRY)
        self.entry.argtypes = [ctypes.c_void_p, ctypes.c_int32] + [ctypes.c_void_p] * 4
        self.entry.restype = ctypes.c_int32
        self.failed_call = library.lib.kiln_model_failed_call
        self.failed_call.restype = ctypes.c_int32
        self.set_threads = openmp_env.set_num_threads(library)
        self.get_threads = openmp_env.get_max_threads(library)
        self.cond = threading.Condition()
        self.run: _Run | None = None
        self.generation = 0
        self.stopped = False
        self.threads: list[threading.Thread] = []
        self.pooled = schedule.threading == "kiln"
        self.partitions: list[Partition] = []

    def start(self) -> None:
        for i in range(0 if self.pooled else 1, self.schedule.workers):
            part = runtime().acquire(self.schedule.cores_per_worker) if self.pooled else None
            if part is not None:
                self.partitions.append(part)
            t = threading.Thread(target=self._serve, args=(part,), name=f"kiln-dataflow-{i}", daemon=True)
            t.start()
            self.threads.append(t)

    def stop(self) -> None:
        with self.cond:
            self.stopped = True
            self.cond.notify_all()
        for part in self.partitions:
            runtime().release(part)
        self.partitions = []

    def execute(self, args: tuple[Any, ...]) -> tuple[int, int] | None:
        """Run every task over `args` (inputs, outputs, arena, weights); the error of the first
        failing task, after every task in flight has finished."""
        run = _Run(self.schedule, args)
        before = self.get_threads() if self.get_threads is not None and not self.pooled else None
        if not self.pooled:
            self._bind()
        try:
            with self.cond:
                self.run, self.generation = run, self.generation + 1
                self.cond.notify_all()
            if not self.pooled:
                self._work(run)
            with self.cond:
                while not run.over:
                    self.cond.wait()
        finally:
            self._settle(run)
            if before is not None:
                self.set_threads(ctypes.c_int(before))
        return run.error

    def _settle(self, run: _Run) -> None:
        """Wait for the tasks in flight, so no kernel writes the arena after the run returns, even
        when the caller is leaving by an exception (KeyboardInterrupt)."""
        with self.cond:
            run.abandoned = not run.over
            self.cond.notify_all()
            while run.in_flight:
                self.cond.wait()
            self.run = None

    def _bind(self) -> None:
        if self.set_threads is not None:
            self.set_threads(ctypes.c_int(self.schedule.cores_per_worker))

    def _serve(self, part: Partition | None) -> None:
        if part is None:
            self._bind()
            self._loop()
        else:
            with running(part):
                self._loop()

    def _loop(self) -> None:
        seen = 0
        while True:
            with self.cond:
                while not self.stopped and (self.generation == seen or self.run is None):
                    self.cond.wait()
                if self.stopped:
                    return
                seen, run = self.generation, self.run
            self._work(run)

    def _work(self, run: _Run) -> None:
        """Take ready tasks until the run is over (or failed)."""
        entry, steps = self.entry, self.steps
        while True:
            with self.cond:
                while not run.ready and not run.over:
                    self.cond.wait()
                if run.over:
                    return
                _, k = heapq.heappop(run.ready)
                run.in_flight += 1
            rc = entry(steps[k], len(steps[k]), *run.args)
            failed = self.failed_call() if rc != 0 else -1  # per thread: read on the thread that failed
            with self.cond:
                run.in_flight -= 1
                if rc != 0:
                    run.error = run.error or (rc, failed)
                else:
                    run.remaining -= 1
                    for u in self.users[k]:
                        run.waiting[u] -= 1
                        if run.waiting[u] == 0:
                            heapq.heappush(run.ready, (-self.schedule.priority[u], u))
                self.cond.notify_all()


class DataflowExecutor(AotExecutor):
    """An AOT-compiled model whose library also exports its calls one by one, run by a crew of
    threads (module doc). Everything else (input checks, weights, the arena, `profile`, export) is
    the AOT executor's: its `kiln_model_run` runs the same calls in one valid order."""

    def __init__(self, mod: IRModule, weights: list[np.ndarray], outputs: list[tuple[tuple[int, ...], np.dtype]],
                 arena_bytes: int, library: Any, report: MemoryReport, calls: tuple[str, ...],
                 schedule: DataflowSchedule):
        super().__init__(mod, weights, outputs, arena_bytes, library, report, calls)
        self.schedule = schedule
        self._copy = getattr(library.lib, COPY_ENTRY)
        self._copy.argtypes = [ctypes.c_void_p] * 4
        self._copy.restype = None
        self._crew = _Crew(library, schedule)
        self._crew_lock = threading.Lock()
        self._crew.start()

    def __del__(self) -> None:
        crew = getattr(self, "_crew", None)
        if crew is not None:
            crew.stop()

    def run(self, feeds: dict[str, Any]) -> list[np.ndarray]:
        arrays = self._inputs(feeds)
        outs = [np.empty(shape, dtype) for shape, dtype in self._outputs]
        slot = self._arenas.acquire()  # an arena of its own, as an AOT run's
        try:
            slot.point(arrays, outs)
            args = (slot.in_ptrs, slot.out_ptrs, slot.arena_ptr, self._weight_ptrs)
            with self._crew_lock:  # the crew runs one model run at a time
                error = self._crew.execute(args)
            if error is not None:
                raise self._failure(*error)
            self._copy(*args)
        finally:
            self._arenas.release(slot)
        return outs
