"""The arena plan for the dataflow executor: tensors of kernels that can run at the same time never
share bytes (checked over the DAG, and the DAG relation against every linear extension by brute force)."""

import itertools

import pytest

from kiln.compiler.concurrent_memory import _Uses, check_concurrent_plan, plan_concurrent_memory
from kiln.compiler.memory_plan import Step, plan_memory
from kiln.compiler.step_graph import chains, step_graph, task_deps
from kiln.errors import MemoryLimitError
from tests.compiler.branching_steps import branching_steps

# x -> a; a -> b -> c (branch 1); a -> d -> e (branch 2); c, e -> f
DIAMOND = [Step("s0", ("x",), ("a",)), Step("s1", ("a",), ("b",)), Step("s2", ("b",), ("c",)),
           Step("s3", ("a",), ("d",)), Step("s4", ("d",), ("e",)), Step("s5", ("c", "e"), ("f",))]
DIAMOND_SIZES = dict.fromkeys("abcdef", 256)


def test_the_sequential_plan_is_unsafe_under_concurrency_and_the_checker_says_so():
    seq = plan_memory(DIAMOND, DIAMOND_SIZES)
    assert check_concurrent_plan(DIAMOND, seq)  # b and d share bytes; s1 and s3 can run at once
    plan = plan_concurrent_memory(DIAMOND, DIAMOND_SIZES)
    assert check_concurrent_plan(DIAMOND, plan) == []
    assert plan.offsets["b"] != plan.offsets["d"] and plan.offsets["b"] != plan.offsets["e"]


def test_ordered_tensors_still_share():
    chain = [Step(f"s{i}", (f"t{i - 1}" if i else "x",), (f"t{i}",)) for i in range(6)]
    sizes = {f"t{i}": 1000 for i in range(5)}  # t5 is the model's output (not planned)
    plan = plan_concurrent_memory(chain, sizes)
    assert check_concurrent_plan(chain, plan) == []
    assert plan.arena_bytes < plan.naive_bytes
    assert plan.arena_bytes == plan_memory(chain, sizes).arena_bytes


@pytest.mark.parametrize("seed", range(40))
def test_generated_branching_graphs_get_safe_plans(seed):
    steps, sizes = branching_steps(seed)
    plan = plan_concurrent_memory(steps, sizes)
    assert check_concurrent_plan(steps, plan) == []
    assert plan.lower_bound <= plan.arena_bytes <= sum(-(-s // 64) * 64 for s in sizes.values())
    assert set(plan.offsets) == set(sizes) and all(o % 64 == 0 for o in plan.offsets.values())


def _linear_extensions(steps):
    g = step_graph(steps)
    for perm in itertools.permutations(range(len(steps))):
        pos = {s: k for k, s in enumerate(perm)}
        if all(pos[p] < pos[i] for i in range(len(steps)) for p in g.preds[i]):
            yield pos


@pytest.mark.parametrize("seed", range(12))
def test_apart_means_ordered_in_every_schedule(seed):
    """Brute force on small graphs: a and b are apart iff in EVERY order all uses of one come before
    the other's producer (one side for all orders)."""
    steps, sizes = branching_steps(seed, n=7)
    uses = _Uses(steps, sizes, step_graph(steps))
    orders = list(_linear_extensions(steps))
    users = {t: [i for i in range(len(steps)) if uses.users[t] >> i & 1] for t in sizes}

    def always_before(a, b):
        return all(max(pos[u] for u in users[a]) < pos[uses.producer[b]] for pos in orders)

    for a, b in itertools.combinations(sorted(sizes), 2):
        assert uses.apart(a, b) == (always_before(a, b) or always_before(b, a)), (a, b)


def test_memory_limit_names_the_dataflow_arena():
    with pytest.raises(MemoryLimitError, match="at the same time"):
        plan_concurrent_memory(DIAMOND, DIAMOND_SIZES, limit=300)


def test_chains_become_tasks_and_their_dependencies():
    g = step_graph(DIAMOND)
    tasks = chains(g)
    assert tasks == [(0,), (1, 2), (3, 4), (5,)]
    assert task_deps(g, tasks) == [(), (0,), (0,), (1, 2)]
    assert g.before(1, 5) and not g.before(1, 3) and not g.before(3, 1)

