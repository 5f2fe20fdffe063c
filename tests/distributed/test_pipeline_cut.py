"""Cutting a model into pipeline stages, without Ray: the cost model, the cuts' optimality, the stage
modules, the report, and the stages run one after another against the whole model."""

from __future__ import annotations

import itertools
import subprocess
import sys

import numpy as np
import pytest

import kiln
from kiln.distributed import stage_plan
from kiln.distributed.stage_cost import CostModel, type_bytes
from kiln.distributed.stage_cut import choose_cuts, spans_at
from kiln.distributed.stage_graph import stage_graph
from kiln.distributed.stage_plan import compile_stages, plan_pipeline, run_stages
from kiln.distributed.stage_worker import stage_step
from kiln.errors import DistributedError, KilnError
from kiln.ir import Constant, Function, If, IRModule, Var
from kiln.ir.types import SizeVar, TensorType
from kiln.models import mlp
from kiln.op import get_op
from tests.distributed.pipeline_models import residual_cnn
from tests.random_graphs import random_module


def _chain(widths: list[int]) -> IRModule:
    """x -> matmul -> relu -> matmul -> relu ..., each matmul as wide as asked (uneven work per operator)."""
    x = Var("x", TensorType((1, widths[0]), "float32"))
    y = x
    for a, b in itertools.pairwise(widths):
        y = get_op("nn.relu")(get_op("linalg.mat_mul")(y, Constant(np.ones((a, b), np.float32))))
    return IRModule({"main": Function((x,), y)})


def test_type_bytes_counts_symbolic_dims_as_one():
    assert type_bytes(TensorType((2, 3), "float32")) == 24
    assert type_bytes(TensorType((SizeVar("N"), 4), "float64")) == 32


def test_work_sets_a_nodes_modelled_time():
    g = stage_graph(_chain([8, 512, 8]))
    seconds = [CostModel().node_seconds(e) for e in g.nodes]
    assert seconds[0] > seconds[1] > 0  # a matmul over a relu
    assert CostModel(threads=4).node_seconds(g.nodes[0]) < seconds[0]


def test_cuts_are_the_brute_force_optimum():
    """The DP's bottleneck equals the least over every placement of the cuts (random graphs and a chain)."""
    cost = CostModel(transfer_rate=1e8)
    modules = [random_module(seed, steps=9)[0] for seed in range(6)] + [_chain([8, 64, 256, 32, 512, 8])]
    for mod, stages in itertools.product(modules, (2, 3)):
        g = stage_graph(mod)
        places = [b for b in range(1, len(g.nodes)) if _cuttable(g, b)]
        if len(places) < stages - 1:
            continue
        best = min(max(s.total_seconds for s in spans_at(g, list(c), cost))
                   for c in itertools.combinations(places, stages - 1))
        got = max(s.total_seconds for s in choose_cuts(g, stages, cost))
        assert got == pytest.approx(best, rel=1e-12)


def _cuttable(g, b: int) -> bool:
    try:
        spans_at(g, [b], CostModel())
    except KilnError:
        return False
    return True


def test_heavy_operators_are_balanced_across_stages():
    plan = plan_pipeline(_chain([8, 256, 256, 256, 256, 256, 8]), 2, CostModel(hop_s=0.0))
    first, second = (s.span.seconds for s in plan.stages)
    assert plan.stages[0].span.stop in (5, 6)  # two of the four 256x256 matmuls each (a relu goes either way)
    assert first == pytest.approx(second, rel=0.2)


def test_report_names_every_tensor_crossing_a_cut():
    plan = plan_pipeline(residual_cnn(), 2, cuts=[5])  # inside block 0: its input and its main path cross
    assert [c[0] for c in plan.cuts[0]] == ["kiln_cut_2", "kiln_cut_4"]
    report = plan.report()
    assert "cut kiln_cut_2 <- nn.relu 'stem.relu': Tensor[(1, 8, 8, 8), float32], 2048 B" in report
    assert "stage 1: operators 5..19" in report and "hands on 4096 B" in report
    assert plan.stages[1].inputs == ("kiln_cut_2", "kiln_cut_4")


def test_a_model_input_read_late_is_forwarded():
    x = Var("x", TensorType((4,), "float32"))
    a = get_op("nn.relu")(x)
    b = get_op("math.tanh")(a)
    mod = IRModule({"main": Function((x,), get_op("math.add")(b, x))})
    plan = plan_pipeline(mod, 2, cuts=[1])
    assert plan.stages[0].forward == ("x",) and plan.stages[1].inputs == ("x", "kiln_cut_0")


def _same(plan, mod, feeds) -> None:
    whole = kiln.build(mod)
    got = run_stages(plan, compile_stages(plan), feeds)
    want = whole.run(feeds)
    assert list(got) == [o.name for o in whole.outputs]
    for g, w in zip(got.values(), want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("stages", [2, 3])
def test_stages_in_a_row_equal_the_mlp(stages):
    model = mlp(batch=1, sizes=(32, 64, 64, 10))
    x = np.random.default_rng(0).standard_normal((1, 32)).astype(np.float32)
    _same(plan_pipeline(model, stages), model, {"input": x})


def test_stages_keep_a_symbolic_batch():
    model = mlp(sizes=(16, 32, 32, 4))  # batch "N": each stage takes any batch, as the whole model does
    x = np.random.default_rng(2).standard_normal((3, 16)).astype(np.float32)
    _same(plan_pipeline(model, 2), model, {"input": x})


@pytest.mark.parametrize("cuts", [None, [5], [3, 12]])
def test_stages_in_a_row_equal_the_residual_cnn(cuts):
    model = residual_cnn()
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    _same(plan_pipeline(model, 1 + len(cuts or [1]), cuts=cuts), model, {"image": x})


@pytest.mark.parametrize("seed", range(6))
def test_stages_in_a_row_equal_random_graphs(seed):
    mod, feeds = random_module(seed)
    _same(plan_pipeline(mod, 3), mod, feeds)


def test_too_many_stages_is_an_error():
    with pytest.raises(KilnError, match="4 operators and 3 places to cut .* at most 4 stages, not 5"):
        plan_pipeline(_chain([4, 4, 4]), 5)
    with pytest.raises(KilnError, match="positive number"):
        plan_pipeline(_chain([4, 4]), 0)
    with pytest.raises(KilnError, match="increasing operator positions"):
        plan_pipeline(_chain([4, 4, 4]), 3, cuts=[2, 1])


def test_control_flow_is_refused():
    x = Var("x", TensorType((2,), "float32"))
    c = Var("c", TensorType((), "bool"))
    mod = IRModule({"main": Function((x, c), If(c, get_op("nn.relu")(x), x))})
    with pytest.raises(KilnError, match="holds a If"):
        plan_pipeline(mod, 2)


def test_a_stage_that_fails_to_compile_is_named(monkeypatch):
    plan = plan_pipeline(mlp(batch=1, sizes=(8, 8, 4)), 2)

    def build(mod, **_):
        if "kiln_cut" in mod.main.params[0].name:
            raise KilnError("no kernel for you")
        return kiln.build(mod)

    monkeypatch.setattr("kiln.compiler.driver.build", build)
    with pytest.raises(DistributedError, match=r"stage 1 of 2 \(kiln_cut_\d+ -> .*\) failed to compile: no kernel"):
        compile_stages(plan)


def test_a_stage_missing_a_value_says_which():
    with pytest.raises(KilnError, match=r"stage 2 needs the values \['b'\]"):
        stage_step(2, ["a", "b"], [], lambda f: f, {"a": np.zeros(1)})


def test_plan_pipeline_is_public():
    assert kiln.distributed.plan_pipeline is stage_plan.plan_pipeline


def test_a_stage_worker_imports_no_compiler():
    """A stage's actor loads a stage compiled in the driver: its process never imports the compiler or onnx."""
    code = ("import sys, kiln.distributed.stage_worker; "
            "print([m for m in sys.modules if m.startswith(('kiln.compiler', 'kiln.transform', 'onnx'))])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
