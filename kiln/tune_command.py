"""`kiln tune MODEL.onnx --trials N --records FILE`: tune a model's kernels and log every measurement.

A command beside cli.py and bench.py, not part of the tune library: it loads the ONNX file, fixes its
dims, tunes the whole model (kiln.compiler.tune_model) and checks the picks inside the compiled model
(kiln.compiler.in_model_check), all layers above kiln.tune.
"""

from __future__ import annotations

from collections.abc import Callable

from kiln.errors import InputError
from kiln.target import Target, host_cores
from kiln.tune import records as rec
from kiln.tune.measure import MeasureOptions
from kiln.tune.progress import ProgressPrinter, ms
from kiln.tune.tasks import Task
from kiln.tune.tuner import TuneOptions, TuneResult

CHECK_ROUNDS = 80  # rounds of the in-model check after tuning, a run of each build (0: no check)


def run_tune(model_path: str, dims: dict[str, int], records: str, *, trials: int = 64, threads: int | None = None,
             timeout: float = 10.0, batch: int = 8, opt_level: int = 2, seed: int = 0, check_rounds: int | None = None,
             say: Callable[[str], None] = print) -> int:
    from kiln.compiler.tune_model import tune_model
    from kiln.feeds import with_fixed_dims
    from kiln.frontend.onnx import from_onnx, load_model

    check_rounds = CHECK_ROUNDS if check_rounds is None else check_rounds
    if trials < 0 or batch < 1 or timeout <= 0 or check_rounds < 0:
        raise InputError(f"--trials and --check-rounds must be >= 0, --batch >= 1 and --timeout > 0, got {trials}, "
                         f"{check_rounds}, {batch}, {timeout}")
    if trials == 0 and check_rounds == 0:
        raise InputError("--trials 0 --check-rounds 0 leaves nothing to do: give trials to run, or rounds to check "
                         "the records' picks in the model")
    threads = threads or host_cores()
    mod = from_onnx(with_fixed_dims(load_model(model_path), dims, say, "; builds match records by shape"))
    if trials:
        options = TuneOptions(trials=trials, batch=batch, seed=seed,
                              measure=MeasureOptions(threads=threads, timeout=timeout))

        def found(tasks: list[Task]) -> None:
            sizes = ", ".join(f"{t.name} ({t.space.size()})" for t in tasks)
            say(f"{len(tasks)} tuning task(s), {trials} trials, {threads} thread(s): {sizes}")

        result = tune_model(mod, records, options, opt_level, ProgressPrinter(), found)
        summary(result, records, model_path, say)
    if check_rounds:
        check(mod, records, threads, check_rounds, opt_level, say)
    return 0


def check(mod, records: str, threads: int, rounds: int, opt_level: int, say: Callable[[str], None] = print) -> None:
    """Check the records' picks for this model inside it (kiln.compiler.in_model_check) and log the verdicts."""
    from kiln.compiler.in_model_check import check_picks

    target = Target.host().key
    configs = rec.best_configs(rec.load(records), target)  # none from a file not written yet
    checks = check_picks(mod, configs, target, threads, rounds, opt_level) if configs else []
    if not checks:
        say("in-model check: no pick beats its default in these records; nothing to check")
        return
    rec.append(records, [c.record for c in checks])
    kept = [c for c in checks if c.kept]
    default, tuned = sum(c.default_seconds for c in checks), sum(c.tuned_seconds for c in checks)
    picked = sum(c.tuned_seconds if c.kept else c.default_seconds for c in checks)
    say(f"in-model check ({rounds} rounds, {threads} thread(s)): kept {len(kept)} of {len(checks)} picks; their groups "
        f"in the model {ms(default)} untuned, {ms(tuned)} with every pick, {ms(picked)} with the kept ones")
    for c in checks:
        if not c.kept:
            say(f"  rejected: {c.name} {ms(c.default_seconds)} default, {ms(c.tuned_seconds)} picked")


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
