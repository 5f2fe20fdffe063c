"""nn.linear_attention compiled (the runtime library's time loop) against its numpy reference:
every update rule, per-key and per-head decay, shared and per-head beta, GQA/MQA, with and without
past_state, every dtype, symbolic batch/length served by one build, and the te evaluator's version."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.ir.dtype import to_numpy
from tests.codegen.conftest import requires_gcc
from tests.topi.compiled_op import op_module, run_compiled
from tests.topi.harness import check

rng = np.random.default_rng(7)
OP = "nn.linear_attention"



def _r(*shape, dtype="float32", s=1.0):
    return (rng.standard_normal(shape) * s).astype(to_numpy(dtype))


def _arrays(rule, b=2, t=5, hq=2, hkv=2, dk=3, dv=4, dtype="float32", past=True, decay_per="key", beta_per="head"):
    uses_decay = rule in ("gated", "gated_delta")
    uses_beta = rule in ("delta", "gated_delta")
    k = _r(b, t, hkv * dk, dtype=dtype, s=0.5)
    decay = None
    if uses_decay:  # log-decays: negative
        decay = -np.abs(_r(b, t, hkv * dk if decay_per == "key" else hkv, s=0.3)).astype(to_numpy(dtype))
    beta = None
    if uses_beta:  # rates in (0, 1)
        beta = rng.uniform(0.1, 0.9, size=(b, t, hkv if beta_per == "head" else 1)).astype(to_numpy(dtype))
    return [_r(b, t, hq * dk, dtype=dtype), k, _r(b, t, hkv * dv, dtype=dtype),
            _r(b, hkv, dk, dv, dtype=dtype, s=0.3) if past else None, decay, beta]


@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@requires_gcc
def test_every_rule_and_dtype(rule, dtype):
    arrays = _arrays(rule, dtype=dtype)
    attrs = dict(q_num_heads=2, kv_num_heads=2, update_rule=rule)
    run_compiled(op_module(OP, arrays, **attrs), [arrays], OP, **attrs)


@pytest.mark.parametrize("case", [
    dict(hq=6, hkv=2, decay_per="head", beta_per="one", past=False),  # GQA, per-head decay, shared beta
    dict(hq=3, hkv=1, dk=1, dv=7, t=1, scale=0.25),  # MQA, one step, unit key size, explicit scale
    dict(hq=2, hkv=2, dk=5, dv=1, t=11, b=1),  # primes, unit value size
])
@requires_gcc
def test_heads_and_odd_shapes(case):
    case = dict(case)
    scale = case.pop("scale", 0.0)
    arrays = _arrays("gated_delta", **case)
    attrs = dict(q_num_heads=case["hq"], kv_num_heads=case["hkv"], update_rule="gated_delta", scale=scale)
    run_compiled(op_module(OP, arrays, **attrs), [arrays], OP, **attrs)


@requires_gcc
def test_past_state_dtype_differs_from_query():
    arrays = _arrays("delta", dtype="float16")
    arrays[3] = arrays[3].astype(np.float32)
    attrs = dict(q_num_heads=2, kv_num_heads=2, update_rule="delta")
    run_compiled(op_module(OP, arrays, **attrs), [arrays], OP, **attrs)


@requires_gcc
def test_symbolic_batch_and_length_one_build():
    sets = [_arrays("gated_delta", b=b, t=t) for b, t in ((1, 1), (3, 7), (2, 40))]
    dims = {(i, ax): n for i in (0, 1, 2, 4, 5) for ax, n in ((0, "B"), (1, "T"))} | {(3, 0): "B"}
    attrs = dict(q_num_heads=2, kv_num_heads=2, update_rule="gated_delta")
    run_compiled(op_module(OP, sets[0], dims, **attrs), sets, OP, **attrs)


@pytest.mark.parametrize("rule", ["linear", "gated_delta"])
def test_te_evaluator_runs_the_reference(rule):
    from tests.topi.cases import A

    check(OP, A(OP, q_num_heads=4, kv_num_heads=2, update_rule=rule), _arrays(rule, hq=4, past=rule == "linear"))


@requires_gcc
def test_aot_library_calls_the_runtime_function():
    from kiln.compiler.aot import build_aot
    from kiln.op import get_op

    arrays = _arrays("gated_delta", hq=4, hkv=2, decay_per="head")
    attrs = dict(q_num_heads=4, kv_num_heads=2, update_rule="gated_delta")
    mod = op_module(OP, arrays, **attrs)
    got = build_aot(mod).run({p.name: a for p, a in zip(mod.main.params, arrays)})
    op = get_op(OP)
    for g, w in zip(got, op.reference(op.attrs_type(**attrs), *arrays)):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)
