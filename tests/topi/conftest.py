"""Fixtures of the schedule tests: a fresh compile cache per test (a kernel-cache hit skips the
schedule and the knobs under test) and a record of which anchor schedules claimed a group."""

from __future__ import annotations

import shutil

import pytest

import kiln.topi.schedule_dispatch as dispatch

# the marks of a schedule test: it needs gcc, and lowers every group afresh (fresh_cache below)
SCHEDULE_TEST = [pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed"),
                 pytest.mark.usefixtures("fresh_cache")]


def recording(fn, names: list[str]):
    """`fn` (a schedule), appending its name to `names` each time it returns a schedule."""
    def f(outputs, target):
        s = fn(outputs, target)
        if s is not None:
            names.append(fn.__name__)
        return s
    return f


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def claimed(monkeypatch):
    """Names of the anchor schedules (and the reduction schedule) that returned a schedule in the test."""
    names: list[str] = []
    for op, fn in list(dispatch.ANCHOR_SCHEDULES["c"].items()):
        monkeypatch.setitem(dispatch.ANCHOR_SCHEDULES["c"], op, recording(fn, names))
    monkeypatch.setattr(dispatch, "schedule_reduce", recording(dispatch.schedule_reduce, names))
    return names
