"""kiln.compiler.in_model_check: tuning picks timed inside the model beside their defaults."""

import numpy as np
import pytest

import kiln
from kiln.compiler.fuse import fuse
from kiln.compiler.in_model_check import check_picks, group_seconds, paired_seconds, static_feeds
from kiln.ir import Function, IRModule, TensorType, Var
from kiln.ir.types import SizeVar
from kiln.target import Target
from kiln.tune.records import IN_MODEL_MARGIN
from kiln.tune.tasks import extract_tasks
from tests.tune.conftest import requires_gcc
from tests.tune.models import tiny_model


def test_a_group_sums_its_calls():
    assert group_seconds(["a", None, "b", "a"], np.array([1.0, 5.0, 2.0, 0.5])) == {"a": 1.5, "b": 2.0}


def _kept(default, pick) -> bool:
    d, p = paired_seconds(np.array(default), np.array(pick))
    return p < d * (1 - IN_MODEL_MARGIN)


def test_a_pick_is_kept_when_faster_in_most_rounds_side_by_side():
    """Round by round: the machine's slow moments slow both builds' runs of a round alike."""
    slow = np.where(np.arange(40) % 3 == 0, 2.0, 1.0)  # every third round runs at half speed
    assert _kept(slow * 1.0, slow * 0.95)  # 5% faster in every round
    assert not _kept(slow * 1.0, slow * 1.0)  # the same: never kept
    # faster in half of the rounds and slower in the others, by far more than the margin: not kept
    assert not _kept(slow, slow * np.where(np.arange(40) % 2 == 0, 0.8, 1.1))
    # faster in 3 of 4 rounds: kept, though the slower quarter is 50% slower
    assert _kept(slow, slow * np.where(np.arange(40) % 4 == 0, 1.5, 0.9))
    # a pick whose runs fell on the slow moments and the default's on the fast ones (turns, not pairs)
    # would look slower; paired, each round compares like with like
    d, p = paired_seconds(slow, slow * 0.9)
    assert d == pytest.approx(1.0) and p == pytest.approx(0.9)


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
    target = Target.host().key
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
