import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.compiler.memory_plan import ALIGN, MemoryLimitError, Step, plan_memory
from kiln.errors import KilnError


@st.composite
def dags(draw):
    """Random DAGs in topological order: step i reads tensors of earlier steps or the graph input,
    writes one to three tensors; some tensors are external (not planned)."""
    n = draw(st.integers(1, 14))
    steps, sizes, made = [], {}, ["in"]
    for i in range(n):
        reads = tuple(draw(st.lists(st.sampled_from(made), min_size=1, max_size=3)))
        outs = tuple(f"t{i}_{k}" for k in range(draw(st.integers(1, 3))))
        for t in outs:
            if draw(st.booleans()) or len(outs) == 1:
                sizes[t] = draw(st.integers(0, 5000))
        made.extend(outs)
        steps.append(Step(f"s{i}", reads, outs))
    return steps, sizes


def _check_plan(steps, sizes, plan):
    assert sorted(plan.order) == list(range(len(steps)))
    pos = {i: p for p, i in enumerate(plan.order)}
    producer = {t: i for i, s in enumerate(steps) for t in s.outputs}
    for i, s in enumerate(steps):
        for t in s.inputs:
            if t in producer:
                assert pos[producer[t]] < pos[i], "order is not topological"
    for t, (a, b) in plan.lifetimes.items():
        assert a == pos[producer[t]]
        assert all(pos[i] <= b for i, s in enumerate(steps) if t in s.inputs)
    assert set(plan.offsets) == set(sizes)
    for t, o in plan.offsets.items():
        assert o % ALIGN == 0 and o + sizes[t] <= plan.arena_bytes
    items = list(plan.offsets)
    for x in items:
        for y in items:
            if x >= y:
                continue
            (a1, b1), (a2, b2) = plan.lifetimes[x], plan.lifetimes[y]
            if a1 <= b2 and a2 <= b1:
                ox, oy = plan.offsets[x], plan.offsets[y]
                assert ox + sizes[x] <= oy or oy + sizes[y] <= ox or not sizes[x] or not sizes[y], (x, y)
    assert plan.lower_bound <= plan.arena_bytes
    assert plan.arena_bytes % ALIGN == 0
    assert plan.naive_bytes == sum(sizes.values())


@settings(max_examples=300, deadline=None)
@given(dags())
def test_plan_properties_on_random_dags(g):
    steps, sizes = g
    _check_plan(steps, sizes, plan_memory(steps, sizes))


@settings(max_examples=100, deadline=None)
@given(dags())
def test_plan_is_deterministic(g):
    steps, sizes = g
    a, b = plan_memory(steps, sizes), plan_memory(steps, sizes)
    assert (a.order, a.offsets, a.arena_bytes) == (b.order, b.offsets, b.arena_bytes)


def test_chain_reuses_memory():
    # x -> a -> b -> c -> d: two buffers ping-pong, the arena is two tensors, not four
    steps = [Step("s0", ("x",), ("a",)), Step("s1", ("a",), ("b",)), Step("s2", ("b",), ("c",)),
             Step("s3", ("c",), ("d",))]
    plan = plan_memory(steps, {"a": 1000, "b": 1000, "c": 1000})
    assert plan.arena_bytes == 2 * 1024 and plan.lower_bound == 2000 and plan.naive_bytes == 3000
    assert plan.offsets["a"] == plan.offsets["c"] != plan.offsets["b"]


def test_order_frees_memory_early():
    # two branches from x, each a big temporary then a small result; the given order opens both big
    # temporaries at once, the planner finishes one branch first
    steps = [Step("big1", ("x",), ("b1",)), Step("big2", ("x",), ("b2",)),
             Step("small1", ("b1",), ("s1",)), Step("small2", ("b2",), ("s2",)),
             Step("join", ("s1", "s2"), ("y",))]
    sizes = {"b1": 4096, "b2": 4096, "s1": 64, "s2": 64}
    plan = plan_memory(steps, sizes)
    names = [steps[i].name for i in plan.order]
    assert names.index("small1") < names.index("big2")
    assert plan.lower_bound == 4096 + 64 + 64 and plan.arena_bytes == 4096 + 128


def test_empty_and_unplanned():
    assert plan_memory([], {}).arena_bytes == 0
    plan = plan_memory([Step("s", ("x",), ("y",))], {})
    assert plan.order == (0,) and plan.arena_bytes == 0 and plan.lower_bound == 0


def test_memory_limit():
    steps = [Step("s0", ("x",), ("a",)), Step("s1", ("a",), ("b",)), Step("s2", ("b",), ("y",))]
    assert plan_memory(steps, {"a": 100, "b": 100}, limit=256).arena_bytes == 256
    with pytest.raises(MemoryLimitError, match=r"arena of 256 bytes.*limit of 200 bytes"):
        plan_memory(steps, {"a": 100, "b": 100}, limit=200)
    assert issubclass(MemoryLimitError, KilnError)


def test_malformed_graph():
    with pytest.raises(ValueError, match="before any step writes it"):
        plan_memory([Step("s0", ("a",), ("b",)), Step("s1", ("x",), ("a",))], {"a": 4})
    with pytest.raises(ValueError, match="written twice"):
        plan_memory([Step("s0", ("x",), ("a",)), Step("s1", ("x",), ("a",))], {"a": 4})
