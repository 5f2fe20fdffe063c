"""`kiln bench-serve`: the workloads of kiln.serve.workloads under the REEF scheduler and its
baselines, in one run, variants taking turns (so machine noise hits them alike):
- rt-alone / be-alone: only the RT clients, only the BE clients (what the others are held to);
- reef: both through ReefScheduler (RT preempts BE);
- fifo: both through one FIFO queue (no priorities, nothing preempted);
- processes / nice19 / sched-idle: RT and BE clients in two OS processes, each with its own
  scheduler over every core, the BE one as is, under nice 19, or under SCHED_IDLE (skipped where
  the OS refuses it): what the operating system alone gives.
Every model is built for Kiln's pool (-threading=kiln) so that cancels reach running kernels.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kiln.errors import KilnError
from kiln.runtime.thread_pool import RuntimeConfig
from kiln.serve.dispatch import InferRequest, ModelConfig, Priority
from kiln.serve.loadgen import Outcome, RtLoad, drive
from kiln.serve.workloads import Workload, build_onnx, feeds_for, workload

VARIANTS = ("rt-alone", "be-alone", "reef", "fifo", "processes", "nice19", "sched-idle")
_IN_PROCESS = ("rt-alone", "be-alone", "reef", "fifo")
SERVED = ModelConfig(queue_limit=100_000)  # BE by default; RT clients set the request's priority


@dataclass
class Run:
    """One variant's merged outcome over every turn, and its scheduler's preemption latencies."""

    variant: str
    outcome: Outcome | None = None
    preempt_s: list[float] = dataclasses.field(default_factory=list)
    skipped: str | None = None  # why it did not run


class Models:
    """The benchmark models, built once per bench-serve run (and exported for the process variants)."""

    def __init__(self) -> None:
        self._built: dict[str, Any] = {}
        self._dirs: dict[str, str] = {}
        self._tmp = tempfile.TemporaryDirectory(prefix="kiln-bench-serve-")

    def get(self, name: str) -> Any:
        if name not in self._built:
            import kiln
            from kiln.target import Target

            target = dataclasses.replace(Target.host(), threading="kiln")
            self._built[name] = kiln.build(build_onnx(name), target=target)
        return self._built[name]

    def directory(self, name: str) -> str:
        if name not in self._dirs:
            self._dirs[name] = str(self.get(name).export(Path(self._tmp.name) / name))
        return self._dirs[name]

    def close(self) -> None:
        self._tmp.cleanup()


def latency_alone(name: str, model: Any, feeds: dict[str, np.ndarray], seconds: float, cores: int | None) -> float:
    """Median seconds of one RT request served with the machine to itself (one client, closed
    loop, after three untimed requests): the server's own cost counts, as it does under load."""
    from kiln.serve.scheduler import ReefScheduler

    sched = ReefScheduler(cores)
    try:
        sched.add(name, model, SERVED)
        for _ in range(3):
            sched.submit(InferRequest(name, feeds, priority=Priority.RT)).result()
        times, end = [], time.perf_counter() + seconds
        while time.perf_counter() < end or len(times) < 5:
            req = InferRequest(name, feeds, priority=Priority.RT)
            sched.submit(req).result()
            times.append(time.perf_counter() - req.arrival)
    finally:
        sched.close()
    return float(np.median(times))


def bench_workload(w: Workload, models: Models, seconds: float, seed: int, repeat: int,
                   variants: tuple[str, ...], cores: int | None) -> dict[str, Any]:
    """Every variant of `w`, `repeat` turns each: the calibration and the runs."""
    feeds = {m: feeds_for(models.get(m).inputs, seed) for m in w.models}
    alone = {s.model: latency_alone(s.model, models.get(s.model), feeds[s.model], min(1.0, seconds), cores)
             for s in w.rt}
    loads = [RtLoad(s.model, s.utilization / alone[s.model], s.arrival) for s in w.rt]
    runs = {v: Run(v) for v in variants}
    for turn in range(repeat):
        order = variants[turn % len(variants):] + variants[:turn % len(variants)]
        for v in order:
            if runs[v].skipped is None:
                _one_turn(runs[v], w, models, feeds, loads, seconds, seed + turn, cores)
    return {"workload": w, "alone_s": alone, "rates": {ld.model: ld.rate for ld in loads}, "runs": runs}


def _one_turn(run: Run, w: Workload, models: Models, feeds: dict, loads: list[RtLoad], seconds: float,
              seed: int, cores: int | None) -> None:
    rt = [] if run.variant == "be-alone" else loads
    be = [] if run.variant == "rt-alone" else list(w.be)
    if run.variant in _IN_PROCESS:
        from kiln.serve.scheduler import ReefScheduler

        sched = ReefScheduler(cores, fifo=run.variant == "fifo")
        try:
            for m in w.models:
                sched.add(m, models.get(m), SERVED)
            outcome = drive(sched, feeds, rt, be, seconds, seed)
        finally:
            sched.close(drain=False)
        run.preempt_s += sched.preemption_latencies()
    else:
        try:
            outcome = _two_processes(run.variant, w, models, loads, seconds, seed, cores)
        except KilnError as e:
            run.skipped = str(e)
            return
    run.outcome = outcome if run.outcome is None else _merge(run.outcome, outcome)


def _merge(a: Outcome, b: Outcome) -> Outcome:
    return Outcome(a.seconds + b.seconds, {m: a.rt_latency_s.get(m, []) + v for m, v in b.rt_latency_s.items()},
                   {m: a.be_done.get(m, 0) + v for m, v in b.be_done.items()}, a.failures + b.failures,
                   a.first_error or b.first_error)


def _two_processes(variant: str, w: Workload, models: Models, loads: list[RtLoad], seconds: float, seed: int,
                   cores: int | None) -> Outcome:
    """RT clients in one process, BE clients (as is, nice 19 or SCHED_IDLE) in another, started together."""
    from kiln.runtime.thread_pool import runtime

    pool = runtime().config
    ctx = multiprocessing.get_context("spawn")
    dirs = {m: models.directory(m) for m in w.models}
    rt_models = sorted({ld.model for ld in loads})
    jobs = [("rt", {m: dirs[m] for m in rt_models}, loads, []),
            (variant, {m: dirs[m] for m in w.be}, [], list(w.be))]
    pipes, procs = [], []
    for role, ds, rt, be in jobs:
        here, there = ctx.Pipe()
        p = ctx.Process(target=_client_process, args=(there, role, ds, rt, be, seconds, seed, pool, cores),
                        daemon=True)
        p.start()
        pipes.append(here)
        procs.append(p)
    try:
        ready = [pipe.recv() for pipe in pipes]
        refused = [r for r in ready if r != "ready"]
        if refused:
            raise KilnError(refused[0])
        go = time.time() + 0.1
        for pipe in pipes:
            pipe.send(go)
        rt_out, be_out = (pipe.recv() for pipe in pipes)
    finally:
        for p in procs:
            p.join(timeout=seconds + 60)
            if p.is_alive():
                p.kill()
    return Outcome(seconds, rt_out.rt_latency_s, be_out.be_done, rt_out.failures + be_out.failures,
                   rt_out.first_error or be_out.first_error)


def _client_process(pipe: Any, role: str, dirs: dict[str, str], rt: list[RtLoad], be: list[str], seconds: float,
                    seed: int, pool: RuntimeConfig, cores: int | None) -> None:
    """A spawned process: lower its priority as `role` says, set Kiln's pool as the parent's (`pool`),
    serve `dirs` on `cores` of it, run its clients from the parent's start time, send back the Outcome
    ("ready" first, or why it cannot run)."""
    try:
        _lower_priority(role)
        import kiln
        from kiln.runtime.thread_pool import configure_runtime
        from kiln.serve.scheduler import ReefScheduler

        configure_runtime(pool.cores, pool.spin_us, pool.pin)
        sched = ReefScheduler(cores)
        feeds = {}
        for m, d in dirs.items():
            model = kiln.load(d).model
            sched.add(m, model, SERVED)
            feeds[m] = feeds_for(model.inputs, seed)
    except (OSError, KilnError) as e:
        pipe.send(f"{role}: {e}")
        return
    pipe.send("ready")
    go = pipe.recv()
    time.sleep(max(0.0, go - time.time()))
    try:
        pipe.send(drive(sched, feeds, rt, be, seconds, seed))
    finally:
        sched.close(drain=False)


def _lower_priority(role: str) -> None:
    """nice19: nice 19; sched-idle: SCHED_IDLE (OSError where not permitted); else nothing. Set
    before any thread starts, so the pool's workers inherit it."""
    if role == "nice19":
        os.nice(19 - os.nice(0))
    elif role == "sched-idle":
        if not hasattr(os, "SCHED_IDLE"):
            raise OSError("SCHED_IDLE is not available on this system")
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def bench_serve(names: list[str], seconds: float = 60.0, seed: int = 0, repeat: int = 1,
                variants: tuple[str, ...] = VARIANTS, cores: int | None = None) -> list[dict[str, Any]]:
    """Run each named workload (kiln.serve.workloads) and return its results (kiln.serve.bench_report
    turns them into the table, JSON and HTML)."""
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise KilnError(f"unknown bench-serve variant '{unknown[0]}'; the variants are {', '.join(VARIANTS)}")
    if seconds <= 0 or repeat < 1:
        raise KilnError(f"bench-serve needs a positive duration and repeat count (got {seconds} s, {repeat})")
    ws = [workload(n) for n in names]
    models = Models()
    try:
        return [bench_workload(w, models, seconds, seed, repeat, variants, cores) for w in ws]
    finally:
        models.close()
