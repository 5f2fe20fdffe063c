"""Kiln sets libgomp's spin count before it loads a kernel library, unless the user has set one."""

import os

from kiln.codegen import CompileCache, build_library, openmp_env
from kiln.tune import measure

from .conftest import requires_gcc
from .test_build import add_const, run


def _unset(monkeypatch) -> None:
    monkeypatch.setenv("GOMP_SPINCOUNT", "placeholder")  # NOTE: recorded, so the test's value is undone after it
    monkeypatch.delenv("GOMP_SPINCOUNT")


@requires_gcc
def test_loading_a_library_sets_the_spin_count(tmp_path, monkeypatch):
    _unset(monkeypatch)
    run(build_library([add_const(1.0)], "m", cache=CompileCache(tmp_path)), 1.0)
    assert os.environ["GOMP_SPINCOUNT"] == str(openmp_env.SPIN_COUNT) == "1000"


@requires_gcc
def test_the_users_spin_count_is_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("GOMP_SPINCOUNT", "77")
    run(build_library([add_const(1.0)], "m", cache=CompileCache(tmp_path)), 1.0)
    assert os.environ["GOMP_SPINCOUNT"] == "77"


def test_the_tuners_child_waits_as_a_model_does(monkeypatch):
    """The measuring child gets the same spin count as a model run, or the user's."""
    seen = []

    class Proc:
        def __init__(self, *args, env, **kwargs):
            seen.append(env["GOMP_SPINCOUNT"])
            raise RuntimeError("stop here")

    monkeypatch.setattr(measure.subprocess, "Popen", Proc)
    for user in (None, "5"):
        if user is None:
            _unset(monkeypatch)
        else:
            monkeypatch.setenv("GOMP_SPINCOUNT", user)
        try:
            measure._run_child([measure.KernelSpec("lib.so", "f", ())], measure.MeasureOptions())
        except RuntimeError:
            pass
    assert seen == ["1000", "5"]
