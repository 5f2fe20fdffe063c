"""Which candidates to measure next: simulated annealing over the knob space, ranked by the cost model.

Until the model has enough points the batch is random (exploration). Afterwards most of a batch is
the model's best unmeasured configs (found by annealing chains that start at the best measured ones,
or by scoring every config of a small space), and an epsilon fraction stays random so that a wrong
model cannot trap the search in one corner.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from kiln.topi.knobs import KnobSpace
from kiln.tune.cost_model import CostModel

Config = dict[str, object]
ConfigId = tuple[tuple[str, object], ...]
EXHAUSTIVE = 128  # spaces up to this size are scored whole instead of annealed


def config_id(config: Mapping[str, object], space: KnobSpace) -> ConfigId:
    """A hashable identity of a config within the space (missing knobs read as their defaults)."""
    return tuple((name, config.get(name, default)) for name, (_, default) in space.knobs.items())


def random_config(space: KnobSpace, rng: np.random.Generator) -> Config:
    return {name: choices[int(rng.integers(len(choices)))] for name, (choices, _) in space.knobs.items()}


def neighbour(config: Mapping[str, object], space: KnobSpace, rng: np.random.Generator) -> Config:
    """The config with one knob (that has a choice) moved to another of its values."""
    names = [n for n, (choices, _) in space.knobs.items() if len(choices) > 1]
    out = dict(config)
    if not names:
        return out
    name = names[int(rng.integers(len(names)))]
    choices = space.knobs[name][0]
    here = choices.index(out[name]) if out.get(name) in choices else 0
    out[name] = choices[(here + 1 + int(rng.integers(len(choices) - 1))) % len(choices)]
    return out


def all_configs(space: KnobSpace) -> list[Config]:
    configs: list[Config] = [{}]
    for name, (choices, _) in space.knobs.items():
        configs = [{**c, name: v} for c in configs for v in choices]
    return configs


@dataclass
class SearchOptions:
    epsilon: float = 0.2  # fraction of each batch chosen at random once the model is trained
    chains: int = 8
    steps: int = 24
    start_temperature: float = 1.0  # in log-time units
    end_temperature: float = 0.05


def propose(space: KnobSpace, measured: set[ConfigId], model: CostModel, featurize: Callable[[Config], np.ndarray],
            n: int, rng: np.random.Generator, best: list[Config], options: SearchOptions | None = None
            ) -> list[Config]:
    """Up to `n` unmeasured configs to measure next (fewer when the space runs out)."""
    options = options or SearchOptions()
    out: list[Config] = []
    seen = set(measured)

    def take(c: Config) -> None:
        cid = config_id(c, space)
        if cid not in seen and len(out) < n:
            seen.add(cid)
            out.append({name: v for name, v in cid})

    explore = options.epsilon * n  # epsilon-greedy: in expectation, that many of the batch are random
    exploit = n - int(explore) - int(rng.random() < explore - int(explore))
    if model.trained and exploit > 0:
        for c in _ranked(space, measured, model, featurize, rng, best, options)[:exploit]:
            take(c)
    _fill_random(space, seen, rng, n - len(out), take)
    return out


def _fill_random(space: KnobSpace, seen: set[ConfigId], rng: np.random.Generator, k: int,
                 take: Callable[[Config], None]) -> None:
    if k <= 0:
        return
    if space.size() <= EXHAUSTIVE:
        rest = [c for c in all_configs(space) if config_id(c, space) not in seen]
        for i in rng.permutation(len(rest))[:k]:
            take(rest[int(i)])
        return
    for _ in range(20 * k):
        before = len(seen)
        take(random_config(space, rng))
        k -= len(seen) > before
        if k <= 0:
            return


def _ranked(space: KnobSpace, measured: set[ConfigId], model: CostModel, featurize: Callable[[Config], np.ndarray],
            rng: np.random.Generator, best: list[Config], options: SearchOptions) -> list[Config]:
    """Unmeasured configs, best predicted first."""
    if space.size() <= EXHAUSTIVE:
        pool = [c for c in all_configs(space) if config_id(c, space) not in measured]
    else:
        pool = _anneal(space, model, featurize, rng, best, options)
        pool = [c for c in pool if config_id(c, space) not in measured]
    if not pool:
        return []
    scores = model.predict(np.stack([featurize(c) for c in pool]))
    return [pool[int(i)] for i in np.argsort(scores, kind="stable")]


def _anneal(space: KnobSpace, model: CostModel, featurize: Callable[[Config], np.ndarray], rng: np.random.Generator,
            best: list[Config], options: SearchOptions) -> list[Config]:
    """Every config the annealing chains visit (the caller ranks them)."""
    chains = [dict(c) for c in best[:options.chains // 2]]
    chains += [random_config(space, rng) for _ in range(options.chains - len(chains))]
    scores = model.predict(np.stack([featurize(c) for c in chains]))
    visited = {config_id(c, space): c for c in chains}
    for step in range(options.steps):
        frac = step / max(options.steps - 1, 1)
        temp = options.start_temperature * (options.end_temperature / options.start_temperature) ** frac
        moves = [neighbour(c, space, rng) for c in chains]
        new = model.predict(np.stack([featurize(c) for c in moves]))
        for i, (c, s) in enumerate(zip(moves, new)):
            visited.setdefault(config_id(c, space), c)
            if s <= scores[i] or rng.random() < math.exp(-(s - scores[i]) / temp):
                chains[i], scores[i] = c, s
    return list(visited.values())
