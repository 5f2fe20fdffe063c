"""Starting a best-effort run that the scheduler can stop and move: `Model.start` fixes the cores of
its run at the start, but a best-effort run preempted for real-time work should resume on the cores
that work leaves idle (dynamic padding) and return to every core afterwards. Its `PoolRuns` reads
`partition` at every `run()`, so the scheduler keeps the control and sets the partition before each
resume (a launch resumed on a different partition still skips the iterations that finished: the pool
records iterations, not chunks)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kiln.ir import sizes
from kiln.runtime.aot_executor import AotExecutor
from kiln.runtime.pool_runs import PoolRuns
from kiln.runtime.run_handle import PreemptibleRun

if TYPE_CHECKING:
    from kiln.runtime.model import Model


def preemptible(model: Model) -> bool:
    """The model runs through `kiln_model_run_from` (AOT, static shapes): Model.start would not raise AotError."""
    return isinstance(model.runner, AotExecutor) and model.per_shape is None


def start_movable(model: Model, feeds: dict[str, Any]) -> tuple[PreemptibleRun, PoolRuns | None]:
    """A preemptible run of a `preemptible` model and the control whose partition places it (None
    for kernels not built for Kiln's pool: they ignore partitions, and a cancel stops them only
    between runs). Under the model's memory limit, as Model.start."""
    control = PoolRuns() if model.target.threading == "kiln" else None
    with sizes.memory_limit(model.memory_limit):
        return model.runner.start(feeds, control), control
