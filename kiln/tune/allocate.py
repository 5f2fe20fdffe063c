"""Which task gets the next batch of trials.

Every task first gets one batch (its default config and a few random ones). After that, trials go
where the model spends its time: the task with the largest calls x best time per trial already
spent on it. A kernel that takes 90% of the model keeps getting batches; one that takes a
microsecond stops after its first.
"""

from __future__ import annotations

from collections.abc import Sequence

from kiln.tune.state import TaskState


def first_batch(trials: int, tasks: int, batch: int) -> int:
    """Trials of each task's first batch: a full batch when the budget allows, at least one."""
    return max(1, min(batch, trials // max(tasks, 1)))


def next_task(states: Sequence[TaskState]) -> int | None:
    """The index of the task to tune next, None when every space is exhausted."""
    open_ = [i for i, st in enumerate(states) if not st.exhausted]
    if not open_:
        return None
    untried = [i for i in open_ if states[i].trials == 0]
    if untried:
        return untried[0]

    def share(i: int) -> float:
        st = states[i]
        best = st.best
        return st.task.weight * (best[1] if best else 0.0) / max(st.trials, 1)

    scored = max(open_, key=share)
    if share(scored) > 0:
        return scored
    return min(open_, key=lambda i: states[i].trials)  # nothing has worked yet: spread the trials
