"""What the tuner knows about one task: its measurements, its cost model, its reference outputs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from kiln.tune.cost_model import CostModel
from kiln.tune.features import features
from kiln.tune.search import Config, ConfigId, config_id
from kiln.tune.tasks import Task, lower_with


@dataclass
class TaskState:
    task: Task
    model: CostModel
    measured: dict[ConfigId, float | None] = field(default_factory=dict)  # fastest time per config, None: failed
    configs: dict[ConfigId, Config] = field(default_factory=dict)
    cached_features: dict[ConfigId, np.ndarray] = field(default_factory=dict)
    reference: list[float | None] | None = None  # the default schedule's sampled outputs, this session
    trials: int = 0  # measured in this session
    failures: int = 0
    exhausted: bool = False  # every config of the space is measured

    @property
    def default_seconds(self) -> float | None:
        return self.measured.get(config_id(self.task.default_config, self.task.space))

    @property
    def best(self) -> tuple[Config, float] | None:
        ok = [(s, cid) for cid, s in self.measured.items() if s is not None]
        if not ok:
            return None
        s, cid = min(ok)
        return self.configs[cid], s

    def ranked(self) -> list[Config]:
        """Measured configs that worked, fastest first."""
        return [self.configs[cid] for s, cid in sorted((s, cid) for cid, s in self.measured.items() if s is not None)]

    def featurize(self, config: Config) -> np.ndarray:
        cid = config_id(config, self.task.space)
        if cid not in self.cached_features:
            try:
                func = lower_with(self.task.fn, "probe", config, passes=False).func
            except Exception:  # the candidate cannot be lowered: it will fail; its features are mostly -1
                func = None
            self.cached_features[cid] = features(config, self.task.space, func)
        return self.cached_features[cid]

    def observe(self, config: Config, seconds: float | None) -> None:
        """A measurement (from this session or an old record): keep the fastest, teach the model."""
        cid = config_id(config, self.task.space)
        self.configs[cid] = dict(cid)
        prev = self.measured.get(cid)
        self.measured[cid] = seconds if prev is None or (seconds is not None and seconds < prev) else prev
        self.model.add(self.featurize(config), seconds)


def estimate(states: Sequence[TaskState], tuned: bool) -> float:
    """Model latency estimated from the kernels alone: sum of weight x (best or default) time."""
    total = 0.0
    for st in states:
        best, default = st.best, st.default_seconds
        t = best[1] if tuned and best else default if default is not None else best[1] if best else 0.0
        total += st.task.weight * t
    return total
