"""Tuning picks checked inside the model: every pick timed where it runs, beside its default.

Why: `kiln tune` times each kernel alone, its weights and inputs warm in cache and no neighbour
kernels. Inside a model the same kernel reads data its producer just wrote and weights the other
kernels pushed out of cache. Picks that won alone lost there: built with 100-400-trial records, the
models ran at 1.00x (resnet18, resnet50), 1.02x (mobilenet_v2) and 1.69x (the MLP: one dense 2x
slower in the model) of their untuned time; with the picks this check kept, 0.98x, 0.97x, 0.98x and
0.98x (25th percentiles, builds taking turns, 2 threads).

How: the model is built twice, with every pick and with none (the same groups, so the same calls).
Each round runs the profiling entry (which times every kernel call in C) once for each build, one
right after the other, so both see the same moment of the machine (this kind of machine slows by
1.5-2x for seconds at a time); the two builds share one OpenMP team, so neither waits for the other's
threads to stop spinning. A workload's ratio is its pick's time over its default's in the same round,
and its verdict the RATIO_QUANTILE percentile of the ratios over the rounds: a pick is kept when it
is faster than its default by records.IN_MODEL_MARGIN in at least RATIO_QUANTILE% of the rounds;
else it is recorded as rejected (records.Record.in_model) and builds keep the default.
Measured on identical builds (every keep is false), resnet50 / mobilenet_v2, 2 threads, same time
spent: the 25th percentile of 20 turns of each build (100 ms untimed first) kept 4 of 35 / 17 of 34
groups; the 60th percentile of paired ratios (80-400 rounds) 1 / 1. Rows against flat pointwise convs
(resnet50: four groups changed by 5-9%): turns kept 19 of 35 groups, paired ratios the four.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from kiln.codegen import openmp_env
from kiln.compiler.aot import build_aot
from kiln.ir import dtype as dt
from kiln.ir.module import IRModule
from kiln.ir.sizes import check_alloc
from kiln.ir.types import TensorType
from kiln.runtime.executor import primitive_functions
from kiln.tune import records as rec
from kiln.tune.apply import Tuned
from kiln.tune.tasks import group_name, workload_key

RATIO_QUANTILE = 60


@dataclass(frozen=True)
class Check:
    key: str  # the workload
    name: str  # the group's operators and output shape
    target: str
    config: dict[str, object]  # the pick
    default_seconds: float  # the workload's time in one run of the model (all its calls), untuned: the median
    tuned_seconds: float  # ... and with the pick: the default's times the RATIO_QUANTILE percentile of the ratios

    @property
    def kept(self) -> bool:
        return not self.record.rejected_in_model

    @property
    def record(self) -> rec.Record:
        return rec.Record(self.key, self.target, dict(self.config), None,
                          in_model=(self.default_seconds, self.tuned_seconds))


def check_picks(mod: IRModule, configs: Mapping[str, Mapping[str, object]], target: str, threads: int,
                rounds: int, opt_level: int = 2, seed: int = 0) -> list[Check]:
    """Time the model's groups built with `configs` (workload key -> config) against the default
    schedules, in the model (see the module docstring); one Check per workload a pick applied to."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    tuned = Tuned(configs, target)
    builds = [build_aot(mod, opt_level=opt_level), build_aot(mod, opt_level=opt_level, tuned=tuned)]
    feeds = static_feeds(mod, seed)
    for b in builds:
        set_threads = openmp_env.set_num_threads(b.library)
        if set_threads is not None:
            set_threads(ctypes.c_int(threads))
    for b in builds:  # first runs page the weights in
        b.run(feeds)
    times: list[list[list[tuple[str, float]]]] = [[], []]  # build -> round -> (kernel, seconds) per call
    for _ in range(rounds):
        for b, runs in zip(builds, times):
            runs.append(b.profile(feeds))
    per_key, names = [], {}
    for b, runs in zip(builds, times):
        fns = primitive_functions(b.mod)  # the kernel of group n is fused_n (lower_groups)
        names.update({workload_key(fn, target): group_name(fn) for fn in fns})
        keys = {f"fused_{n}": workload_key(fn, target) for n, fn in enumerate(fns)}
        calls = [keys.get(name) for name, _ in runs[0]]
        per_key.append([group_seconds(calls, np.array([t for _, t in run])) for run in runs])
    checks = []
    for k in sorted(tuned.applied):
        if k not in per_key[0][0] or k not in per_key[1][0]:
            continue
        seconds = paired_seconds(np.array([r[k] for r in per_key[0]]), np.array([r[k] for r in per_key[1]]))
        checks.append(Check(k, names[k], target, dict(configs[k]), *seconds))
    return checks


def paired_seconds(default: np.ndarray, pick: np.ndarray) -> tuple[float, float]:
    """(default's, pick's) seconds of a workload from its times in each round, the two builds' runs side
    by side: the default's median, and that times the RATIO_QUANTILE percentile of the rounds' ratios."""
    seconds = float(np.median(default))
    ratio = float(np.percentile(pick / np.maximum(default, 1e-12), RATIO_QUANTILE))
    return seconds, seconds * ratio


def group_seconds(calls: list[str | None], seconds: np.ndarray) -> dict[str, float]:
    """Workload key -> the summed time of its calls (a group the model runs several times, as
    resnet's repeated blocks, counts every call)."""
    out: dict[str, float] = {}
    for key, t in zip(calls, seconds):
        if key is not None:
            out[key] = out.get(key, 0.0) + float(t)
    return out


def static_feeds(mod: IRModule, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs for every parameter of `mod`'s main (static shapes, as tuning needs): normal floats,
    zero integers (a valid index into anything), false booleans."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for p in mod.main.params:
        t = p.type
        if not isinstance(t, TensorType) or t.shape is None or not all(isinstance(d, int) for d in t.shape):
            raise ValueError(f"input '{p.name}' has type {t}: the in-model check needs static tensor inputs")
        check_alloc(f"input '{p.name}'", t.shape, t.dtype)
        if dt.is_float(t.dtype):
            feeds[p.name] = rng.standard_normal(t.shape).astype(dt.to_numpy(t.dtype))
        else:
            feeds[p.name] = np.zeros(t.shape, dt.to_numpy(t.dtype))
    return feeds
