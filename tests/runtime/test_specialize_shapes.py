"""Run-time specialization on shapes: a group whose parameter dims the types leave open, and that
cannot be lowered with symbolic sizes, compiles for each input shape it sees (cached, capped); a
Scan body (the expanded ONNX LinearAttention) then runs with no host group."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.compiler import specialize as compile_specialized
from kiln.compiler.lower import build_graph_executor as build
from kiln.ir import Function, IRModule, Var
from kiln.ir.types import ANY, TensorType
from kiln.op import get_op
from kiln.runtime import specialize
from tests.codegen.conftest import requires_gcc

pytestmark = requires_gcc
rng = np.random.default_rng(2)



def _open_transpose() -> IRModule:
    """relu then transpose of a tensor whose first and last dims are unknown (ANY)."""
    x = Var("x", TensorType((ANY, 3, ANY), "float32"))
    y = get_op("tensor.transpose")(get_op("nn.relu")(x), perm=(2, 0, 1))
    return IRModule({"main": Function((x,), y)})


def _run(cm, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    (got,) = cm.run({"x": x})
    np.testing.assert_array_equal(got, np.maximum(x, 0).transpose(2, 0, 1))


def test_open_dims_compile_per_shape_and_reuse_kernels():
    cm = build(_open_transpose())
    assert any("only known at run time" in r for r in cm.host_groups), cm.host_groups
    for shape in ((2, 3, 5), (1, 3, 1), (2, 3, 5), (7, 3, 1)):
        _run(cm, shape)
    assert cm.ran_on_host == {}
    (sp,) = cm.specializers.values()
    assert len(sp.cache) == 3  # (2, 3, 5) reused its kernel


def test_shapes_past_the_cap_run_on_the_host(monkeypatch):
    monkeypatch.setattr(specialize, "MAX_SHAPES", 1)
    cm = build(_open_transpose())
    _run(cm, (2, 3, 5))
    assert cm.ran_on_host == {}
    for _ in range(2):
        _run(cm, (3, 3, 2))
    (why,) = cm.ran_on_host.values()
    assert "compiled for 1 input shapes already" in why
    (sp,) = cm.specializers.values()
    assert len(sp.errors) == 1


def test_a_lowering_bug_runs_on_the_host_and_says_so(monkeypatch):
    def broken(fn, name):
        raise RuntimeError("boom")

    monkeypatch.setattr(compile_specialized, "lower_primitive", broken)
    cm = build(_open_transpose())
    _run(cm, (2, 3, 4))
    (why,) = cm.ran_on_host.values()
    assert "lowering failed (RuntimeError: boom)" in why


@pytest.mark.parametrize("case", ["test_linear_attention_gated_delta_expanded",
                                  "test_linear_attention_prefill_with_past_expanded"])
def test_scan_body_of_expanded_linear_attention_compiles(case):
    from tests.conformance.test_compiled_cases import numeric_on_host, run_case

    assert numeric_on_host(run_case(case)) == []  # the Scan itself steps in the executor; its body is compiled


def test_unknown_rank_compiles_per_shape():
    x = Var("x", TensorType(None, "float32"))
    cm = build(IRModule({"main": Function((x,), get_op("nn.relu")(x))}))
    assert any("known rank" in r for r in cm.host_groups), cm.host_groups
    for shape in ((3,), (2, 1, 5)):
        a = rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_array_equal(cm.run({"x": a})[0], np.maximum(a, 0))
    assert cm.ran_on_host == {}
