"""Builds apply tuning records: each fused group is lowered under its workload's best config.

The lowering looks the group's workload key up and schedules it inside `applying(config)`; the
generated source then differs from the untuned one, so the compile cache keys differ by themselves.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping

from kiln.ir.expr import Function
from kiln.target import Target
from kiln.topi.knobs import applying
from kiln.tune.records import tuned_configs
from kiln.tune.tasks import workload_key


class Tuned:
    """Workload key -> config, and which groups a lowering applied one to."""

    def __init__(self, configs: Mapping[str, Mapping[str, object]], target: str | None = None):
        self.configs = {k: dict(v) for k, v in configs.items()}
        self.target = target or Target.host().key
        self.applied: set[str] = set()

    @staticmethod
    def load(records: str | os.PathLike | Mapping[str, Mapping[str, object]], target: str | None = None) -> Tuned:
        target = target or Target.host().key
        return Tuned(tuned_configs(records, target), target)

    def config_for(self, fn: Function) -> dict[str, object] | None:
        key = workload_key(fn, self.target)
        config = self.configs.get(key)
        if config is not None:
            self.applied.add(key)
        return config


@contextlib.contextmanager
def lowering(fn: Function, tuned: Tuned | None) -> Iterator[None]:
    """Lower `fn` inside this block: under its tuned config when there is one."""
    config = tuned.config_for(fn) if tuned is not None and tuned.configs else None
    if config is None:
        yield
        return
    with applying(config):
        yield
