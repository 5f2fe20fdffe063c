"""Tuning a whole model: import it, fuse it as a build would, and tune every tunable group (kiln.tune).

Here and not in tune/ because finding the groups is the driver's fusion: tune sits below the
compiler and tunes the tasks it is given.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kiln.compiler.fuse import fuse
from kiln.ir.module import IRModule
from kiln.tune.tasks import Task, extract_tasks
from kiln.tune.tuner import Progress, TuneOptions, TuneResult, tune_tasks


def tune_model(model: Any, records_path: str | Path | None, options: TuneOptions | None = None, opt_level: int = 2,
               progress: Progress | None = None, on_tasks: Callable[[list[Task]], None] | None = None) -> TuneResult:
    """Tune every tunable group of `model` (an IRModule, or an ONNX model / path with static shapes)."""
    if not isinstance(model, IRModule):
        from kiln.frontend.onnx import from_onnx

        model = from_onnx(model)
    tasks = extract_tasks(fuse(model, opt_level))
    if on_tasks is not None:
        on_tasks(tasks)
    return tune_tasks(tasks, records_path, options, progress)
