import time

import pytest
from hypothesis import given, settings

from kiln.compiler.memory_order import build_graph, cut_points, heuristic_orders, min_peak_order, order_peak, segments
from kiln.compiler.memory_pack import align, arena_size, liveness_bound, pack
from kiln.compiler.memory_plan import Step, plan_memory
from tests.compiler.test_memory_plan import dags
from tests.irregular_dags import channels_for, dag_steps, nas_cells, watts_strogatz


def _all_orders(g) -> list[tuple[int, ...]]:
    n = len(g.preds)
    out = []

    def extend(order: list[int], done: int) -> None:
        if len(order) == n:
            out.append(tuple(order))
        for i in range(n):
            if not done >> i & 1 and g.preds[i] & ~done == 0:
                extend(order + [i], done | 1 << i)

    extend([], 0)
    return out


def _brute_force_min(steps, sizes) -> int:
    g = build_graph(steps, sizes)
    return min(order_peak(g, o) for o in _all_orders(g))


def _is_topological(steps, order) -> bool:
    producer = {t: i for i, s in enumerate(steps) for t in s.outputs}
    pos = {i: p for p, i in enumerate(order)}
    return sorted(order) == list(range(len(steps))) and all(
        pos[producer[t]] < pos[i] for i, s in enumerate(steps) for t in s.inputs if t in producer)


@settings(max_examples=150, deadline=None)
@given(dags())
def test_exact_search_equals_brute_force_on_random_dags(d):
    steps, sizes = d
    if len(steps) > 7:
        steps = steps[:7]
        made = {t for s in steps for t in s.outputs}
        sizes = {t: b for t, b in sizes.items() if t in made}
    found = min_peak_order(steps, sizes)
    assert found.exact and _is_topological(steps, found.order)
    assert found.peak == _brute_force_min(steps, sizes)


@pytest.mark.parametrize("seed", range(12))
def test_exact_search_equals_brute_force_on_tiny_irregular_networks(seed):
    preds = watts_strogatz(seed, 5) if seed % 2 else nas_cells(seed, 1, nodes=2)
    steps, sizes = dag_steps(preds, channels_for(seed, preds))
    if len(steps) > 11:
        pytest.skip("too many orders to enumerate")
    found = min_peak_order(steps, sizes)
    assert found.exact and _is_topological(steps, found.order)
    assert found.peak == _brute_force_min(steps, sizes)


@pytest.mark.parametrize("seed", range(6))
def test_exact_search_beats_every_heuristic_on_irregular_networks(seed):
    preds = watts_strogatz(seed, 16) if seed % 2 else nas_cells(seed, 3)
    steps, sizes = dag_steps(preds, channels_for(seed, preds))
    found = min_peak_order(steps, sizes, budget_s=10.0)
    assert _is_topological(steps, found.order)
    g = build_graph(steps, sizes)
    for name, order in heuristic_orders(g).items():
        assert found.peak <= order_peak(g, order) == found.heuristic_peaks[name], name
    assert found.topological_peak == found.heuristic_peaks["program"]


def test_search_on_a_random_wiring_graph_finds_a_lower_peak_than_the_topological_order():
    gains = []
    for seed in range(6):
        preds = watts_strogatz(seed, 16)
        found = min_peak_order(*dag_steps(preds, channels_for(seed, preds)), budget_s=10.0)
        gains.append(found.topological_peak / found.peak)
    assert max(gains) > 1.05, gains


def test_search_stops_at_its_budget_with_the_best_heuristic():
    preds = watts_strogatz(7, 90, k=8, p=0.9)
    steps, sizes = dag_steps(preds, channels_for(7, preds))
    t0 = time.monotonic()
    found = min_peak_order(steps, sizes, budget_s=0.2)
    assert time.monotonic() - t0 < 0.2 + 2.0  # the heuristics and the segment set-up come on top
    assert not found.exact
    assert _is_topological(steps, found.order)
    assert found.peak <= min(found.heuristic_peaks.values())


def test_cut_points_split_a_chain_of_diamonds():
    steps = [Step("a", ("x",), ("a",)), Step("b", ("a",), ("b",)), Step("c", ("a",), ("c",)),
             Step("d", ("b", "c"), ("d",)), Step("e", ("d",), ("e",))]
    g = build_graph(steps, {t: 64 for t in "abcde"})
    assert cut_points(g) == [0, 3, 4]
    assert segments(g) == [[0], [1, 2], [3], [4]]


def test_branch_order_matters_and_the_search_finds_it():
    # two branches from a: one keeps a big tensor alive to its end, the other shrinks at once; running
    # the shrinking branch first needs the big one's bytes only once
    steps = [Step("a", ("x",), ("a",)), Step("b1", ("a",), ("b1",)), Step("b2", ("b1",), ("b2",)),
             Step("c1", ("a",), ("c1",)), Step("c2", ("c1",), ("c2",)), Step("j", ("b2", "c2"), ("j",))]
    sizes = {"a": 100, "b1": 1000, "b2": 1000, "c1": 10, "c2": 10, "j": 1}
    found = min_peak_order(steps, sizes)
    assert found.exact and found.peak == _brute_force_min(steps, sizes) < found.topological_peak


def test_packing_reaches_the_bound_on_a_residual_stage():
    # the lifetimes of resnet18's first stage (sizes in units of 100,352 bytes): greedy by size alone
    # puts one block input above the bound
    life = {"t5": (1, 2), "t6": (2, 8), "t7": (3, 4), "t9": (4, 5), "t12": (5, 6), "t13": (6, 7),
            "t15": (7, 8), "t18": (8, 14), "t1": (0, 1)}
    unit = 100352
    sizes = {"t1": 6 * unit, "t5": 32 * unit, "t6": 8 * unit, "t7": 18 * unit, "t9": 18 * unit, "t12": 8 * unit,
             "t13": 18 * unit, "t15": 18 * unit, "t18": 8 * unit}
    offsets = pack(life, sizes)
    assert arena_size(offsets, sizes) == align(liveness_bound(life, sizes))


@pytest.mark.parametrize("seed", range(4))
def test_plan_arena_stays_near_the_bound_on_irregular_networks(seed):
    preds = watts_strogatz(seed, 20) if seed % 2 else nas_cells(seed, 3)
    steps, sizes = dag_steps(preds, channels_for(seed, preds))
    plan = plan_memory(steps, sizes)
    assert plan.lower_bound <= plan.arena_bytes <= 1.05 * plan.lower_bound
