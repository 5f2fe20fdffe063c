"""The fuzzer in `make test`: a fixed-seed sample of mutated models, every stored regression, and the
harness's own classification of planted failures (so that these tests can fail)."""

from __future__ import annotations

import glob
import json
import os
import pathlib

import pytest

from tests.fuzz.case import Case
from tests.fuzz.runner import failures, run_cases, summary

SAMPLE = 300
REGRESSIONS = os.path.join(os.path.dirname(__file__), "regressions")


def _stored() -> list[tuple[str, dict]]:
    return [(path[: -len(".json")], json.loads(pathlib.Path(path).read_text()))
            for path in sorted(glob.glob(f"{REGRESSIONS}/*.json"))]


def test_sample_has_no_traceback_crash_or_hang():
    results = run_cases(Case(i, seed=0) for i in range(SAMPLE))
    bad = failures(results)
    assert not bad, f"{summary(results)}\n" + "\n".join(
        f"case {r.index} {r.model}/{r.mutation}/{r.executor}: {r.outcome}: {r.error} at {r.where}" for r in bad)


@pytest.fixture(scope="module")
def replayed() -> dict[str, object]:
    stored = _stored()
    cases = [Case(i, file=stem + ".onnx", executor=note["executor"]) for i, (stem, note) in enumerate(stored)]
    return {stem: r for (stem, _), r in zip(stored, run_cases(cases))}


@pytest.mark.parametrize("stem,note", _stored(), ids=lambda v: os.path.basename(v) if isinstance(v, str) else "")
def test_regression_replays_to_its_expected_outcome(replayed, stem, note):
    result = replayed[stem]
    assert result.outcome == note["expected"], f"{result.outcome}: {result.error} at {result.where}"
    assert result.agree is not False


@pytest.mark.parametrize("kind", ["traceback", "crash", "hang"])
def test_planted_failure_is_caught(kind):
    results = run_cases([Case(0), Case(1)], time_cap=2.0, planted=kind)
    assert [r.outcome for r in results] == [kind, kind]
    assert failures(results) == results
