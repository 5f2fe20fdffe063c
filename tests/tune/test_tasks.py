import kiln
from kiln.compiler.fuse import fuse
from kiln.tune.tasks import extract_tasks, group_text, knob_space, workload_key
from tests.tune.models import tiny_model


def _tasks(model, target="test-target"):
    return extract_tasks(fuse(kiln.from_onnx(model)), target)


def test_tasks_are_the_distinct_groups_with_knobs():
    tasks = _tasks(tiny_model())
    assert len(tasks) == 2
    assert len({t.key for t in tasks}) == 2
    for t in tasks:
        assert t.space.knobs and t.space.size() > 1
        assert t.default_config == {n: d for n, (_, d) in t.space.knobs.items()}
        assert t.target == "test-target" and t.weight == 1


def test_workload_keys_depend_on_structure_and_target_not_on_weights_or_names():
    a = {t.name: t.key for t in _tasks(tiny_model(seed=0))}
    assert a == {t.name: t.key for t in _tasks(tiny_model(seed=1))}  # other weights, same workloads
    assert set(a.values()).isdisjoint(t.key for t in _tasks(tiny_model(width=32)))  # other shapes
    assert set(a.values()).isdisjoint(t.key for t in _tasks(tiny_model(), "another-cpu"))


def test_group_text_names_parameters_by_position():
    fn = _tasks(tiny_model())[0].fn
    text = group_text(fn)
    assert text.startswith("%0 = param") and all(p.name not in text for p in fn.params if len(p.name) > 2)
    assert workload_key(fn, "x") == workload_key(fn, "x") != workload_key(fn, "y")


def test_knob_space_collects_the_schedules_knobs():
    fn = _tasks(tiny_model())[0].fn
    space, kernel = knob_space(fn)
    assert "rowwise.rows" in space.knobs  # the softmax group's schedule (kiln/topi/x86_rowwise.py)
    assert kernel.func is not None
