"""Schedule knobs: the tunable choices of a schedule (tile sizes, loop order, vector width, unroll).

A schedule asks `knob(name, choices, default)` for each choice it makes instead of using a constant.
Outside tuning the answer is the default, or the value a tuning record gives for this workload
(`applying(config)`). While the tuner explores a schedule it passes a `KnobSpace` to `applying`,
which collects every knob the schedule asked for: that is the template's search space. Knobs live
here, in topi, because schedules use them; tune/ (below topi in the layering) imports them.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field


@dataclass
class KnobSpace:
    """The knobs one schedule asked for, in order: name -> (choices, default)."""

    knobs: dict[str, tuple[tuple, object]] = field(default_factory=dict)

    def size(self) -> int:
        n = 1
        for choices, _ in self.knobs.values():
            n *= len(choices)
        return n


@dataclass(frozen=True)
class _Active:
    config: Mapping[str, object]
    space: KnobSpace | None


_ACTIVE: contextvars.ContextVar[_Active | None] = contextvars.ContextVar("kiln_knobs", default=None)


def knob(name: str, choices: Sequence, default):
    """The value of a schedule choice: the active config's, if it names one of `choices`, else `default`."""
    choices = tuple(choices)
    if default not in choices:
        choices = (*choices, default)
    active = _ACTIVE.get()
    if active is None:
        return default
    if active.space is not None:
        active.space.knobs.setdefault(name, (choices, default))
    value = active.config.get(name, default)
    return value if value in choices else default


@contextlib.contextmanager
def applying(config: Mapping[str, object] | None = None, space: KnobSpace | None = None) -> Iterator[None]:
    """Schedules built inside this block read their knobs from `config` (and record them in `space`)."""
    token = _ACTIVE.set(_Active(dict(config or {}), space))
    try:
        yield
    finally:
        _ACTIVE.reset(token)
