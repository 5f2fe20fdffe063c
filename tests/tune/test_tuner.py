import numpy as np
import pytest

import kiln
from kiln.compiler.fuse import fuse
from kiln.compiler.tune_model import tune_model
from kiln.target import Target
from kiln.topi.schedule_generic import vector_lanes
from kiln.tune import records as rec
from kiln.tune.measure import MeasureOptions
from kiln.tune.tasks import extract_tasks
from kiln.tune.tuner import TuneOptions
from tests.tune.conftest import requires_gcc
from tests.tune.models import tiny_model

OPTIONS = TuneOptions(trials=4, batch=2, measure=MeasureOptions(threads=1, timeout=5.0, repeats=2, min_seconds=0.0))


def _feeds():
    return {"x": np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)}


@requires_gcc
def test_tuning_records_every_trial_and_resumes_where_it_stopped(tmp_path):
    path = tmp_path / "log.jsonl"
    seen = []
    result = tune_model(tiny_model(), path, OPTIONS,
                        progress=lambda s: seen.append((s.current, s.states[s.current].trials, s.trials, s.total)))
    first = rec.load(path)
    assert len(first) == 4 and {r.target for r in first} == {Target.host().key}
    assert seen == [(0, 2, 2, 4), (1, 2, 4, 4)] and len(result.states) == 2
    for st in result.states:
        assert st.default_seconds is not None  # the default is always measured first
        assert st.best[1] <= st.default_seconds
    assert result.estimated(True) <= result.estimated(False)
    again = tune_model(tiny_model(), path, OPTIONS)
    second = rec.load(path)[4:]
    assert len(second) == 4  # each batch measured the default again (its anchor), recording only the new configs
    old = {(r.key, tuple(sorted(r.config.items()))) for r in first}
    new = {(r.key, tuple(sorted(r.config.items()))) for r in second}
    assert not old & new
    assert all(len(st.measured) == 4 and st.trials == 2 for st in again.states)


@requires_gcc
def test_a_check_in_the_model_is_not_a_measurement_when_tuning_resumes(tmp_path, monkeypatch):
    """A record of an in-model check has no kernel time: resuming must not count it as a failed trial."""
    import kiln.tune.tuner as tuner
    from kiln.tune.measure import MeasureResult

    monkeypatch.setattr(tuner, "run_kernels", lambda specs, options: [
        MeasureResult(1e-6, None, [1e-6] * 3, [0.5]) for _ in specs])
    task = extract_tasks(fuse(kiln.from_onnx(tiny_model())))[0]
    path = tmp_path / "log.jsonl"
    rec.append(path, [rec.Record(task.key, task.target, dict(task.default_config), None, in_model=(1e-3, 2e-3))])
    result = tuner.tune_tasks([task], path, TuneOptions(trials=1, batch=1, measure=OPTIONS.measure))
    assert result.states[0].failures == 0 and result.states[0].default_seconds == 1e-6


@requires_gcc
def test_every_batch_is_scaled_to_the_default_measured_first(tmp_path, monkeypatch):
    """The machine runs 3x slower during the second batch: its times, anchored on the default measured in
    the same batch, land on the first batch's scale."""
    import kiln.tune.tuner as tuner
    from kiln.tune.measure import MeasureResult

    calls = []

    def fake(specs, options):  # default 2 us, every candidate 1 us; 3x slower from the second batch on
        calls.append(len(specs))
        slow = 3.0 if len(calls) > 1 else 1.0
        return [MeasureResult(slow * (2e-6 if i == 0 else 1e-6), None, [slow * (2e-6 if i == 0 else 1e-6)] * 3, [0.5])
                for i in range(len(specs))]

    monkeypatch.setattr(tuner, "run_kernels", fake)
    path = tmp_path / "log.jsonl"
    task = extract_tasks(fuse(kiln.from_onnx(tiny_model())))[:1]
    tuner.tune_tasks(task, path, TuneOptions(trials=4, batch=2))
    logged = rec.load(path)
    assert calls == [2, 3] and len(logged) == 4  # the second batch's default is its anchor, not a record
    assert logged[0].config == task[0].default_config and logged[0].seconds == pytest.approx(2e-6)
    assert [r.seconds for r in logged[1:]] == pytest.approx([1e-6] * 3)


@requires_gcc
@pytest.mark.parametrize("executor", ["aot", "graph"])
def test_a_build_uses_the_recorded_config_and_computes_the_same(executor):
    model = tiny_model()
    tasks = extract_tasks(fuse(kiln.from_onnx(model)))
    odd = {t.key: {**t.default_config, "generic.vector": 1, "generic.unroll": 2, "generic.parallel_min": 1 << 10}
           for t in tasks}
    same = {t.key: t.default_config for t in tasks}
    plain = kiln.build(model, executor=executor)
    tuned = kiln.build(model, executor=executor, records=odd)
    default = kiln.build(model, executor=executor, records=same)
    assert tuned.tuned.applied == set(odd)
    assert tuned.library.source.code != plain.library.source.code
    assert default.library.source.code == plain.library.source.code  # the default config is the untuned build
    for a, b in zip(plain.run(_feeds()), tuned.run(_feeds())):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


@requires_gcc
def test_a_build_reads_the_fastest_config_from_a_records_file(tmp_path):
    model = tiny_model()
    task = next(t for t in extract_tasks(fuse(kiln.from_onnx(model))) if "relu" in t.name)
    slow = {**task.default_config, "generic.vector": 1}
    fast = {**task.default_config, "generic.vector": 16}
    path = tmp_path / "log.jsonl"
    rec.append(path, [rec.Record(task.key, Target.host().key, slow, 2e-6), rec.Record(task.key, Target.host().key, fast, 1e-6),
                      rec.Record(task.key, "another-cpu", slow, 1e-9)])
    from_file = kiln.build(model, records=path)
    direct = kiln.build(model, records={task.key: fast})
    assert from_file.tuned.applied == {task.key}
    assert from_file.library.source.code == direct.library.source.code


@requires_gcc
def test_a_candidate_whose_outputs_differ_from_the_default_is_a_failure(tmp_path, monkeypatch):
    import kiln.tune.tuner as tuner
    from kiln.tune.measure import MeasureResult

    def fake(specs, options):  # the first kernel of a batch is the default: the others compute garbage
        return [MeasureResult(1e-6 * (i + 1), None, [1.0], [0.5, 1.0] if i == 0 else [0.5, 7.0])
                for i in range(len(specs))]

    monkeypatch.setattr(tuner, "run_kernels", fake)
    path = tmp_path / "log.jsonl"
    result = tune_model(tiny_model(), path, TuneOptions(trials=4, batch=2))
    logged = rec.load(path)
    assert [r.error is None for r in logged] == [True, False, True, False]
    assert all("wrong result" in r.error for r in logged if r.error)
    for st in result.states:
        assert st.best[0] == st.task.default_config and st.failures == 1


def test_same_outputs_tolerates_rounding_not_differences():
    from kiln.tune.measure import same_outputs

    assert same_outputs([1.0, None, 3.0], [1.0 + 1e-7, None, 3.0])
    assert not same_outputs([1.0, 2.0], [1.0, 2.5])
    assert not same_outputs([1.0], [1.0, 2.0])


@requires_gcc
def test_a_candidate_that_cannot_be_lowered_is_a_recorded_failure(tmp_path, monkeypatch):
    import kiln.tune.candidates as candidates

    real = candidates.lower_with

    def picky(fn, name, config, passes=True):
        if config.get("generic.vector", vector_lanes(Target.host())) != vector_lanes(Target.host()):  # groups without the knob lower as usual
            raise RuntimeError("no such schedule")
        return real(fn, name, config, passes)

    monkeypatch.setattr(candidates, "lower_with", picky)
    path = tmp_path / "log.jsonl"
    result = tune_model(tiny_model(), path, OPTIONS)
    failed = [r for r in rec.load(path) if r.error]
    assert failed and all(r.error.startswith("lower: RuntimeError") and r.seconds is None for r in failed)
    assert all(st.best is not None for st in result.states)  # the defaults (the host's lanes) still worked


def test_a_candidate_is_timed_by_its_ratios_to_the_default_round_by_round():
    """A burst of load that hit the candidate's second and third repeats, and the default's third only:
    the medians of the times would call the candidate 4.5x slower, each round's ratio says 0.9x."""
    from kiln.tune.measure import MeasureResult
    from kiln.tune.tuner import _paired

    default = MeasureResult(1.0, None, [1.0, 1.0, 5.0])
    candidate = MeasureResult(4.5, None, [0.9, 4.5, 4.5])
    assert _paired(candidate, default, None) == pytest.approx(0.9)
    assert _paired(candidate, default, 2.0) == pytest.approx(1.8)  # on the scale of the first default measured
    assert _paired(candidate, None, 2.0) == 4.5  # no anchor (it failed): the time as measured
