"""nn.attention compiled with a KV cache (past/present), nonpad_kv_seqlen, a mask shorter than the
keys (external cache) and softmax_precision, against the operator's numpy reference."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.ir.dtype import to_numpy
from tests.codegen.conftest import requires_gcc
from tests.topi.compiled_op import op_module, run_compiled

pytestmark = requires_gcc
rng = np.random.default_rng(11)
OP = "nn.attention"



def _r(*shape, dtype="float32"):
    return rng.standard_normal(shape).astype(to_numpy(dtype))


def _inputs(b, hq, hkv, sq, skv, past, d=5, dv=3, dtype="float32", three_d=False):
    if three_d:
        q, k, v = _r(b, sq, hq * d, dtype=dtype), _r(b, skv, hkv * d, dtype=dtype), _r(b, skv, hkv * dv, dtype=dtype)
    else:
        q, k, v = _r(b, hq, sq, d, dtype=dtype), _r(b, hkv, skv, d, dtype=dtype), _r(b, hkv, skv, dv, dtype=dtype)
    return [q, k, v, None, _r(b, hkv, past, d, dtype=dtype), _r(b, hkv, past, dv, dtype=dtype)]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_past_and_present_every_dtype(dtype):
    arrays = _inputs(2, 3, 3, 3, 2, 5, dtype=dtype)
    run_compiled(op_module(OP, arrays, is_causal=1), [arrays], OP, is_causal=1)


@pytest.mark.parametrize("attrs", [
    dict(is_causal=1, qk_matmul_output_mode=3),
    dict(qk_matmul_output_mode=1, softcap=1.5, scale=0.4),
    dict(left_window_size=2, right_window_size=0, qk_matmul_output_mode=2),
])
def test_past_gqa_odd_shapes(attrs):
    arrays = _inputs(1, 6, 2, 7, 3, 11, d=7, dv=1)  # GQA 6 -> 2 heads, primes and a unit value size
    run_compiled(op_module(OP, arrays, **attrs), [arrays], OP, **attrs)


def test_past_with_packed_3d_heads_and_a_float_mask():
    arrays = _inputs(2, 4, 2, 3, 3, 4, three_d=True)
    arrays[3] = _r(3, 7)  # (Sq, past + Skv)
    attrs = dict(q_num_heads=4, kv_num_heads=2, is_causal=1)
    run_compiled(op_module(OP, arrays, **attrs), [arrays], OP, **attrs)


def test_symbolic_past_and_new_lengths_one_build():
    """The present length (past + new) is unknown to the type relation: it comes from the inputs."""
    sets = [_inputs(2, 2, 1, 1, n, p) for n, p in ((1, 6), (3, 1), (2, 13))]
    for a in sets:
        a[3:] = [None, *a[4:]]
    dims = {(1, 2): "S", (2, 2): "S", (4, 2): "P", (5, 2): "P"}
    mod = op_module(OP, sets[0], dims, is_causal=1, qk_matmul_output_mode=3)
    run_compiled(mod, sets, OP, is_causal=1, qk_matmul_output_mode=3)


@pytest.mark.parametrize("mask", [None, "bool", "float"])
def test_nonpad_kv_seqlen_with_causal_offsets(mask):
    """Lengths below Sq make the causal offset nonpad - Sq negative: those rows are fully masked (zeros)."""
    b, sq, skv = 3, 4, 7
    arrays = _inputs(b, 2, 2, sq, skv, 1)[:3] + [None, None, None, np.array([7, 2, 5], np.int64)]
    if mask == "bool":
        arrays[3] = rng.uniform(size=(sq, skv)) > 0.3
    elif mask == "float":
        arrays[3] = _r(b, 1, sq, skv)
    run_compiled(op_module(OP, arrays, is_causal=1, qk_matmul_output_mode=3), [arrays], OP, is_causal=1,
                 qk_matmul_output_mode=3)


@pytest.mark.parametrize("kind", ["bool", "float16"])
def test_mask_shorter_than_the_keys_pads_as_masked(kind):
    arrays = _inputs(1, 2, 2, 3, 2, 6)
    arrays[3] = rng.uniform(size=(3, 5)) > 0.2 if kind == "bool" else _r(1, 2, 3, 5, dtype="float16")
    run_compiled(op_module(OP, arrays, left_window_size=3), [arrays], OP, left_window_size=3)


def test_softmax_precision_float64_compiles():
    arrays = _inputs(1, 2, 2, 3, 4, 2)
    run_compiled(op_module(OP, arrays, softmax_precision="float64", qk_matmul_output_mode=3), [arrays], OP,
                 softmax_precision="float64", qk_matmul_output_mode=3)


def test_narrow_softmax_precision_runs_on_the_host():
    arrays = _inputs(1, 2, 2, 3, 4, 2)
    cm = run_compiled(op_module(OP, arrays, softmax_precision="float16"), [arrays], OP, host_ok=True,
                      softmax_precision="float16")
    assert any("softmax_precision float16" in r for r in cm.host_groups), cm.host_groups


def test_mask_longer_than_the_keys_runs_on_the_host():
    q, k, v, _, _, _ = _inputs(1, 2, 2, 3, 4, 1)
    mask = _r(3, 6)
    cm = op_module(OP, [q, k, v, mask])
    from kiln.compiler.lower import build_graph_executor as build

    assert any("attn_mask of key length 6 for 4 keys" in r for r in build(cm).host_groups)
