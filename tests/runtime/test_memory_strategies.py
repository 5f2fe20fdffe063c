import shutil
import subprocess
import sys

import numpy as np
import pytest

import kiln
from kiln.errors import KilnError, MemoryLimitError
from kiln.runtime.counted_executor import CountedExecutor
from tests.irregular_dags import channels_for, dag_model, nas_cells, watts_strogatz

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")


def _feeds(seed: int = 0) -> dict[str, np.ndarray]:
    return {"input": np.random.default_rng(seed).standard_normal((1, 3, 8, 8)).astype(np.float32)}


@pytest.fixture(scope="module", params=["random-wiring", "nas-cells"])
def dag(request):
    preds = watts_strogatz(3, 10) if request.param == "random-wiring" else nas_cells(2, 2, nodes=3)
    model = dag_model(preds, channels_for(3, preds))
    return model, kiln.build(model, executor="aot"), kiln.build(model, executor="aot", memory_strategy="counted")


def test_irregular_networks_run_as_the_interpreter_does(dag):
    model, arena, counted = dag
    want = kiln.evaluate(kiln.from_onnx(model), _feeds())
    for compiled in (arena, counted):
        (got,) = compiled.run(_feeds())
        np.testing.assert_allclose(got, want[0], rtol=1e-4, atol=1e-5)


def test_memory_report_of_the_order_search(dag):
    _, arena, counted = dag
    r = arena.runner.memory_report()
    assert r.strategy == "arena" and r.search_exact
    assert r.search_peak <= r.topological_peak and r.search_peak <= r.lower_bound <= r.arena_bytes
    assert r.arena_bytes <= 1.05 * r.lower_bound
    assert "order peak" in str(r) and "minimum" in str(r)
    c = counted.runner.memory_report()
    assert c.strategy == "counted" and c.lower_bound == c.search_peak and str(c).startswith("counted:")


def test_counted_pool_peak_is_the_orders_simulated_peak(dag):
    _, _, counted = dag
    assert isinstance(counted.runner, CountedExecutor) and counted.runner.arena_bytes == 0
    counted.run(_feeds())
    pool = counted.runner.last_pool
    assert pool.peak_live == counted.runner.memory_report().lower_bound
    assert pool.peak_held >= pool.peak_live
    profile = counted.runner.profile(_feeds())
    assert [name for name, _ in profile] == list(counted.runner.memory_report().order)


def test_counted_limit_fails_before_running_with_the_sizes(dag):
    _, _, counted = dag
    peak = counted.runner.memory_report().lower_bound
    counted.runner.last_pool = None
    counted.memory_limit = peak - 1
    try:
        with pytest.raises(MemoryLimitError, match=rf"needs {peak / 1024:.1f} KiB.*memory limit"):
            counted.run(_feeds())
    finally:
        counted.memory_limit = None
    assert counted.runner.last_pool is None  # no kernel ran


def test_arena_limit_fails_before_running_with_the_sizes(dag):
    _, arena, _ = dag
    r = arena.runner.memory_report()
    arena.memory_limit = r.arena_bytes - 1
    try:
        with pytest.raises(MemoryLimitError, match=rf"arena of intermediate tensors .*{r.lower_bound} bytes.*needs "):
            arena.run(_feeds())
    finally:
        arena.memory_limit = None


def test_build_limit_is_checked_against_each_strategys_bytes(tmp_path):
    preds = watts_strogatz(3, 10)
    model = dag_model(preds, channels_for(3, preds))
    for strategy, what in (("arena", "an arena"), ("counted", "a peak")):
        with pytest.raises(MemoryLimitError, match=rf"needs {what} of \d+ bytes .*memory strategy '{strategy}'"):
            kiln.build(model, executor="aot", memory_strategy=strategy, memory_limit=4000)


def test_counted_model_saves_and_loads(dag, tmp_path):
    _, arena, counted = dag
    counted.export(tmp_path / "m")
    session = kiln.load(tmp_path / "m")
    assert isinstance(session.model.runner, CountedExecutor)
    np.testing.assert_array_equal(session.run(None, _feeds(1))[0], arena.run(_feeds(1))[0])
    shown = subprocess.run([sys.executable, "-m", "kiln", "show", str(tmp_path / "m")], capture_output=True,
                           text=True, check=True).stdout
    assert "memory: counted:" in shown and "order peak" in shown


def test_strategy_errors(dag):
    model, arena, _ = dag
    with pytest.raises(KilnError, match="memory strategy 'pool' is not one of arena, counted"):
        kiln.build(model, memory_strategy="pool")
    with pytest.raises(KilnError, match="built with 'arena'"):
        kiln.InferenceSession(arena, memory_strategy="counted")
    with pytest.raises(KilnError, match="memory_order_budget"):
        kiln.build(model, memory_order_budget=-1)
