"""`kiln tune MODEL.onnx --trials N --records FILE`: tune a model's kernels and log every measurement."""

from __future__ import annotations

import os
from collections.abc import Callable

from kiln.errors import InputError
from kiln.tune.measure import MeasureOptions
from kiln.tune.progress import ProgressPrinter, ms
from kiln.tune.tasks import Task
from kiln.tune.tuner import TuneOptions, TuneResult, tune


def run_tune(model_path: str, dims: dict[str, int], records: str, *, trials: int = 64, threads: int | None = None,
             timeout: float = 10.0, batch: int = 8, opt_level: int = 2, seed: int = 0,
             say: Callable[[str], None] = print) -> int:
    from kiln.bench import with_fixed_dims
    from kiln.frontend.onnx import load_model

    if trials < 1 or batch < 1 or timeout <= 0:
        raise InputError(f"--trials and --batch must be >= 1 and --timeout > 0, got {trials}, {batch}, {timeout}")
    threads = threads or os.cpu_count() or 1
    model = with_fixed_dims(load_model(model_path), dims, say, "; builds match records by shape")
    options = TuneOptions(trials=trials, batch=batch, seed=seed,
                          measure=MeasureOptions(threads=threads, timeout=timeout))

    def found(tasks: list[Task]) -> None:
        sizes = ", ".join(f"{t.name} ({t.space.size()})" for t in tasks)
        say(f"{len(tasks)} tuning task(s), {trials} trials, {threads} thread(s): {sizes}")

    result = tune(model, records, options, opt_level, ProgressPrinter(), found)
    summary(result, records, model_path, say)
    return 0


def summary(result: TuneResult, records: str, model_path: str, say: Callable[[str], None] = print) -> None:
    say(f"{'task':34s} {'calls':>5s} {'trials':>6s} {'failed':>6s} {'default':>12s} {'best':>12s} {'speedup':>8s}")
    for st in result.states:
        best = st.best
        default = st.default_seconds
        gain = f"{default / best[1]:7.2f}x" if best and default else f"{'-':>8s}"
        say(f"{st.task.name[:34]:34s} {st.task.weight:5d} {st.trials:6d} {st.failures:6d} {ms(default):>12s} "
            f"{ms(best[1] if best else None):>12s} {gain}")
    untuned, tuned = result.estimated(False), result.estimated(True)
    ratio = f" ({untuned / tuned:.2f}x)" if tuned else ""
    say(f"estimated model latency from the tuned kernels: {ms(untuned)} untuned -> {ms(tuned)} tuned{ratio}; "
        f"{result.seconds:.1f} s")
    say(f"records in {records}; compare with `kiln bench {model_path} --records {records}`")
