"""Tuning picks checked inside the model: every pick timed where it runs, beside its default.

Why: `kiln tune` times each kernel alone, its weights and inputs warm in cache and no neighbour
kernels. Inside a model the same kernel reads data its producer just wrote and weights the other
kernels pushed out of cache. Picks that won alone lost there: built with 100-400-trial records, the
models ran at 1.00x (resnet18, resnet50), 1.02x (mobilenet_v2) and 1.69x (the MLP: one dense 2x
slower in the model) of their untuned time; with the picks this check kept, 0.98x, 0.97x, 0.98x and
0.98x (25th percentiles, builds taking turns, 2 threads).

How: the model is built twice, with every pick and with none (the same groups, so the same calls),
and the two take turns: each turn first runs untimed for SETTLE_S seconds (the other build's threads
stop spinning, the caches hold this build's data), then runs the profiling entry, which times every
kernel call in C. A group's time is the QUANTILE percentile of its calls' times over the turns: this
kind of machine slows by 1.5-2x for seconds at a time, and a low percentile measures the kernel, not
the machine. A pick not faster than its default by records.IN_MODEL_MARGIN is recorded as rejected
(records.Record.in_model), and builds keep the default schedule for it.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from kiln.codegen import openmp_env
from kiln.ir import dtype as dt
from kiln.ir.module import IRModule
from kiln.ir.types import TensorType
from kiln.tune import records as rec
from kiln.tune.apply import Tuned
from kiln.tune.tasks import group_name, workload_key

SETTLE_S = 0.1
QUANTILE = 25
PROFILE_RUNS = 2  # runs one turn's profile averages


@dataclass(frozen=True)
class Check:
    key: str  # the workload
    name: str  # the group's operators and output shape
    target: str
    config: dict[str, object]  # the pick
    default_seconds: float  # the workload's time in one run of the model (all its calls), untuned
    tuned_seconds: float  # ... and with the pick

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
    from kiln.runtime.aot import build_aot
    from kiln.runtime.executor import primitive_functions

    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    tuned = Tuned(configs, target)
    builds = [build_aot(mod, opt_level=opt_level), build_aot(mod, opt_level=opt_level, tuned=tuned)]
    feeds = static_feeds(mod, seed)
    for b in builds:
        set_threads = openmp_env.set_num_threads(b.library)
        if set_threads is not None:
            set_threads(ctypes.c_int(threads))
    times: list[list[list[tuple[str, float]]]] = [[], []]  # build -> turn -> (kernel, seconds) per call
    for _ in range(rounds):
        for b, turns in zip(builds, times):
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < SETTLE_S:
                b.run(feeds)
            turns.append(b.profile(feeds, PROFILE_RUNS))
    per_key, names = [], {}
    for b, turns in zip(builds, times):
        fns = primitive_functions(b.mod)  # the kernel of group n is fused_n (lower_groups)
        names.update({workload_key(fn, target): group_name(fn) for fn in fns})
        keys = {f"fused_{n}": workload_key(fn, target) for n, fn in enumerate(fns)}
        calls = [keys.get(name) for name, _ in turns[0]]
        per_call = np.percentile(np.array([[t for _, t in turn] for turn in turns]), QUANTILE, axis=0)
        per_key.append(group_seconds(calls, per_call))
    return [Check(k, names[k], target, dict(configs[k]), per_key[0][k], per_key[1][k])
            for k in sorted(tuned.applied) if k in per_key[0] and k in per_key[1]]


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
        if dt.is_float(t.dtype):
            feeds[p.name] = rng.standard_normal(t.shape).astype(dt.to_numpy(t.dtype))
        else:
            feeds[p.name] = np.zeros(t.shape, dt.to_numpy(t.dtype))
    return feeds
