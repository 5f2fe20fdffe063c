"""The cost model that picks dataflow or compiled sequential: dataflow only for balanced branches."""

import pytest

from kiln.compiler.dataflow_choice import MARGIN, StepWork, choose
from kiln.compiler.memory_plan import Step
from kiln.compiler.step_graph import step_graph

SMALL = StepWork(200_000, 16_000)  # a batch-1 conv of a small network: about 10 us on one core


def _branches(lengths, stem=1):
    """A stem chain, then one branch per length from the stem's output, joined by one step."""
    steps = [Step(f"stem{i}", (f"s{i - 1}" if i else "x",), (f"s{i}",)) for i in range(stem)]
    ends = []
    for b, n in enumerate(lengths):
        prev = f"s{stem - 1}"
        for i in range(n):
            steps.append(Step(f"b{b}.{i}", (prev,), (f"b{b}.{i}",)))
            prev = f"b{b}.{i}"
        ends.append(prev)
    steps.append(Step("join", tuple(ends), ("y",)))
    return step_graph(steps), len(steps)


def test_balanced_branches_of_small_kernels_run_as_dataflow():
    g, n = _branches([100, 100])
    c = choose(g, [SMALL] * n, cores=2)
    assert c.use and c.workers == 2 and c.cores_per_worker == 1
    assert c.dataflow_s * MARGIN < c.sequential_s
    assert len(c.tasks) == 4 and c.deps[-1] == (1, 2)
    assert c.priority[0] > c.priority[1] > c.priority[-1]  # the longest rest of the run goes first


@pytest.mark.parametrize("lengths", [[20], [20, 1], [20, 4], [3, 3]])
def test_chains_and_unbalanced_or_short_branches_stay_sequential(lengths):
    g, n = _branches(lengths, stem=10)
    c = choose(g, [SMALL] * n, cores=2)
    assert not c.use
    assert "sequential" in str(c)


def test_large_kernels_gain_too_little_from_splitting_cores():
    g, n = _branches([6, 6])
    assert not choose(g, [StepWork(500_000_000, 4_000_000)] * n, cores=2).use


def test_one_core_is_always_sequential():
    g, n = _branches([100, 100])
    c = choose(g, [SMALL] * n, cores=1)
    assert not c.use and c.dataflow_s == float("inf")


def test_four_branches_on_four_cores_take_four_workers():
    g, n = _branches([100] * 4)
    c = choose(g, [SMALL] * n, cores=4)
    assert c.use and c.workers == 4 and c.cores_per_worker == 1
