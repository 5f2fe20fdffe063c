"""The tuning loop: pick a task, propose a batch, compile and measure it, record it, refit the model.

Every batch of a task holds its default config first: the records then know what tuning gained (a
build never picks a config slower than the default it measured), the default's outputs are the
reference every other candidate's outputs must match (a schedule that computes something else is a
failure, never a record a build could pick), and its time is the anchor that puts every batch on the
scale of the task's first (see _measure_batch). Records already in the file for
the same workload and target count as measured: tuning resumes where it stopped.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kiln.tune import records as rec
from kiln.tune.allocate import first_batch, next_task
from kiln.tune.candidates import build_candidates
from kiln.tune.cost_model import CostModel
from kiln.tune.measure import MeasureOptions, MeasureResult, run_kernels, same_outputs
from kiln.tune.search import Config, SearchOptions, config_id, propose
from kiln.tune.state import TaskState, estimate
from kiln.tune.tasks import Task


@dataclass
class TuneOptions:
    trials: int = 64  # measurements in all, over every task
    batch: int = 8  # candidates compiled together and measured by one process
    measure: MeasureOptions = field(default_factory=MeasureOptions)
    search: SearchOptions = field(default_factory=SearchOptions)
    seed: int = 0


@dataclass
class TuneStatus:
    """What a progress display gets after every batch."""

    states: list[TaskState]
    current: int  # the task just measured
    trials: int  # done in this session, over all tasks
    total: int  # planned
    elapsed: float


@dataclass
class TuneResult:
    states: list[TaskState]
    seconds: float  # wall time of the session

    def estimated(self, tuned: bool = True) -> float:
        return estimate(self.states, tuned)


Progress = Callable[[TuneStatus], None]


def tune_tasks(tasks: Sequence[Task], records_path: str | Path | None, options: TuneOptions | None = None,
               progress: Progress | None = None) -> TuneResult:
    options = options or TuneOptions()
    start = time.perf_counter()
    rng = np.random.default_rng(options.seed)
    old = rec.load(records_path) if records_path is not None else []
    states = []
    for t in tasks:
        st = TaskState(t, CostModel(options.seed))
        for r in old:
            if r.key == t.key and r.target == t.target and r.in_model is None:  # not a check in the model
                st.observe(dict(r.config), r.seconds)
        st.model.fit()
        states.append(st)
    done, first = 0, first_batch(options.trials, len(states), options.batch)
    with tempfile.TemporaryDirectory(prefix="kiln-tune-") as workdir:
        while done < options.trials:
            i = next_task(states)
            if i is None:
                break
            n = min(first if states[i].trials == 0 else options.batch, options.trials - done)
            done += _step(states[i], n, rng, Path(workdir), records_path, options)
            if progress is not None:
                progress(TuneStatus(states, i, done, options.trials, time.perf_counter() - start))
    return TuneResult(states, time.perf_counter() - start)


def _step(st: TaskState, n: int, rng: np.random.Generator, workdir: Path, records_path: str | Path | None,
          options: TuneOptions) -> int:
    """Measure up to `n` new candidates of the task, after its default; returns how many were measured (the
    default counts where it is new, not where it is the anchor of a batch)."""
    space = st.task.space
    default = st.task.default_config
    batch = propose(space, set(st.measured), st.model, st.featurize, n, rng, st.ranked(), options.search)
    batch = [c for c in batch if config_id(c, space) != config_id(default, space)]
    anchored = st.default_seconds is not None
    batch = batch[:n] if anchored else batch[:n - 1]
    if not batch and anchored:
        st.exhausted = True
        return 0
    _measure_batch(st, [default, *batch], workdir, records_path, options)
    st.model.fit()
    st.exhausted = len(st.measured) >= space.size()
    return len(batch) + (not anchored)


def _measure_batch(st: TaskState, batch: list[Config], workdir: Path, records_path: str | Path | None,
                   options: TuneOptions) -> None:
    """Measure `batch` (the default first) and record it. The default is every batch's anchor: a candidate's
    time is the default's known time (its first measurement: an earlier batch, old records, or this one)
    times the candidate's median ratio to the default over the batch's rounds (the kernels are timed
    round-robin), and the anchor is not recorded again. Every record of a task is then on one scale however
    the machine's speed drifts (the same default measured 4.6 ms in one batch, 3.1 ms in another), and each
    ratio compares two kernels timed side by side."""
    built = build_candidates(st.task, batch, workdir)
    runnable = [b for b in built if b.spec is not None]
    results = iter(run_kernels([b.spec for b in runnable], options.measure)) if runnable else iter(())
    measured = [next(results) if b.spec is not None else None for b in built]
    anchor = measured[0] if measured[0] is not None and measured[0].ok else None
    known = st.default_seconds
    new = []
    for k, (cfg, b, res) in enumerate(zip(batch, built, measured)):
        seconds, error = None, b.error
        if res is not None:
            seconds, error = _paired(res, anchor, known) if k else res.seconds, res.error
            if res.check is not None and k == 0:
                st.reference = res.check
            elif res.check is not None and st.reference is not None and not same_outputs(res.check, st.reference):
                seconds, error = None, "wrong result: outputs differ from the default schedule's"
        if k == 0 and known is not None:  # the anchor
            continue
        st.trials += 1
        st.failures += seconds is None
        st.observe(cfg, seconds)
        new.append(rec.Record(st.task.key, st.task.target, st.configs[config_id(cfg, st.task.space)], seconds,
                              error=error, threads=options.measure.threads))
    if records_path is not None:
        rec.append(records_path, new)


def _paired(res: MeasureResult, anchor: MeasureResult | None, known: float | None) -> float | None:
    """A candidate's time on the scale of its task's first default measurement (see _measure_batch)."""
    if res.seconds is None or anchor is None or len(res.repeats) != len(anchor.repeats):
        return res.seconds
    ratio = float(np.median([t / a for t, a in zip(res.repeats, anchor.repeats)]))
    return ratio * (known if known is not None else anchor.seconds)
