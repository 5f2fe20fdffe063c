"""kiln.runtime.in_model_check: tuning picks timed inside the model beside their defaults."""

import numpy as np
import pytest

import kiln
from kiln.ir import Function, IRModule, TensorType, Var
from kiln.ir.types import SizeVar
from kiln.runtime.executor import fuse
from kiln.runtime.in_model_check import check_picks, group_seconds, static_feeds
from kiln.tune.tasks import extract_tasks, host_target
from tests.tune.conftest import requires_gcc
from tests.tune.models import tiny_model


def test_a_group_sums_its_calls():
    assert group_seconds(["a", None, "b", "a"], np.array([1.0, 5.0, 2.0, 0.5])) == {"a": 1.5, "b": 2.0}


def test_static_feeds_are_valid_inputs_of_every_dtype():
    params = [Var("f", TensorType((2, 3), "float32")), Var("i", TensorType((4,), "int64")),
              Var("b", TensorType((1,), "bool"))]
    mod = IRModule({"main": Function(tuple(params), params[0])})
    feeds = static_feeds(mod)
    assert feeds["f"].dtype == np.float32 and feeds["f"].shape == (2, 3) and feeds["f"].std() > 0
    assert feeds["i"].dtype == np.int64 and not feeds["i"].any()  # zero: a valid index into anything
    assert feeds["b"].dtype == np.bool_ and not feeds["b"].any()
    symbolic = Var("x", TensorType((SizeVar("n"), 3), "float32"))
    with pytest.raises(ValueError, match="'x'"):
        static_feeds(IRModule({"main": Function((symbolic,), symbolic)}))


@requires_gcc
def test_each_applied_pick_is_timed_in_the_model_and_recorded():
    mod = kiln.from_onnx(tiny_model())
    target = host_target()
    tasks = extract_tasks(fuse(mod, 2))
    picks = {tasks[0].key: dict(tasks[0].default_config), "not-a-workload-of-this-model": {"a": 1}}
    checks = check_picks(mod, picks, target, threads=1, rounds=2)
    assert [c.key for c in checks] == [tasks[0].key]
    c = checks[0]
    assert c.name == tasks[0].name and c.config == tasks[0].default_config and c.target == target
    assert c.default_seconds > 0 and c.tuned_seconds > 0
    r = c.record
    assert r.seconds is None and r.in_model == (c.default_seconds, c.tuned_seconds)
    assert c.kept == (c.tuned_seconds < c.default_seconds * 0.98)
