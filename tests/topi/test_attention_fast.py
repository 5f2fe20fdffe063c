"""The blocked nn.attention compute and schedule (kiln/topi/x86_attention.py) against the operator's
numpy reference: odd and prime sizes, masks, causal and windows, softcap, GQA, KV cache, nonpad,
qk outputs, every dtype; and which groups take the blocked path."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.codegen.c_source import generate
from kiln.compiler.fuse import fuse
from kiln.compiler.lower import lower_groups
from kiln.ir.dtype import to_numpy
from kiln.topi.knobs import applying
from tests.codegen.conftest import requires_gcc
from tests.topi.compiled_op import op_module, run_compiled

pytestmark = requires_gcc
rng = np.random.default_rng(5)
OP = "nn.attention"



def _r(*shape, dtype="float32"):
    return rng.standard_normal(shape).astype(to_numpy(dtype))


def _qkv(b, hq, hkv, sq, skv, d, dv, dtype="float32"):
    return [_r(b, hq, sq, d, dtype=dtype), _r(b, hkv, skv, d, dtype=dtype), _r(b, hkv, skv, dv, dtype=dtype)]


def _check(arrays, **attrs):
    mod = op_module(OP, arrays, **attrs)
    run_compiled(mod, [arrays], OP, **attrs)
    return mod


def _blocked(mod) -> bool:
    kernels, _, _ = lower_groups(fuse(mod))
    return "attn_fast_ctx" in generate([k.func for k in kernels]).code


@pytest.mark.parametrize("shape", [
    (1, 2, 2, 7, 13, 5, 5),  # primes: no lane split of the keys, a partial query block
    (2, 3, 3, 1, 1, 8, 8),  # one query, one key
    (1, 1, 1, 33, 48, 16, 3),  # a value size below the vector width
    (1, 12, 12, 128, 128, 32, 32),  # BERT-base-like heads
    (1, 4, 2, 9, 33, 8, 8),  # grouped query heads
])
def test_blocked_matches_reference(shape):
    assert _blocked(_check(_qkv(*shape)))


@pytest.mark.parametrize("attrs", [
    dict(is_causal=1),
    dict(scale=0.3, softcap=2.0),
    dict(left_window_size=3, right_window_size=1),
    dict(qk_matmul_output_mode=1, softcap=1.5),
    dict(qk_matmul_output_mode=2, is_causal=1),
])
def test_bounds_softcap_and_qk_outputs(attrs):
    assert _blocked(_check(_qkv(1, 3, 3, 17, 23, 8, 8), **attrs))


@pytest.mark.parametrize("mask_shape, dtype", [
    ((17, 32), "float32"),
    ((1, 1, 17, 32), "float32"),
    ((2, 3, 17, 32), "bool"),
    ((32,), "bool"),
])
def test_masks(mask_shape, dtype):
    arrays = _qkv(2, 3, 3, 17, 32, 8, 8)
    mask = rng.random(mask_shape) < 0.7 if dtype == "bool" else _r(*mask_shape)
    arrays.append(mask)
    assert _blocked(_check(arrays))


def test_fully_masked_rows_give_zeros():
    arrays = _qkv(1, 2, 2, 5, 16, 4, 4)
    mask = np.ones((5, 16), bool)
    mask[1] = False
    arrays.append(mask)
    _check(arrays)


def test_nan_and_inf_inputs_reach_the_output():
    arrays = _qkv(1, 1, 1, 4, 16, 4, 4)
    arrays[1][0, 0, 3, 0] = np.nan
    arrays[0][0, 0, 2, 1] = np.inf
    _check(arrays)


def test_kv_cache_and_nonpad():
    arrays = _qkv(2, 4, 2, 3, 5, 8, 8) + [None, _r(2, 2, 11, 8), _r(2, 2, 11, 8)]
    assert _blocked(_check(arrays, is_causal=1))
    nonpad = _qkv(2, 2, 2, 4, 16, 8, 8) + [None, None, None, np.array([9, 16], np.int64)]
    _check(nonpad)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_every_dtype(dtype):
    assert _blocked(_check(_qkv(1, 2, 2, 6, 20, 8, 8, dtype), is_causal=1))


def test_probabilities_output_takes_the_general_path():
    assert not _blocked(_check(_qkv(1, 2, 2, 6, 9, 4, 4), qk_matmul_output_mode=3))


def _packed(b, hq, hkv, sq, skv, d, dv):
    return [_r(b, sq, hq * d), _r(b, skv, hkv * d), _r(b, skv, hkv * dv)]


@pytest.mark.parametrize("shape", [
    (2, 3, 3, 11, 5, 4, 4),  # primes, a partial query block
    (1, 1, 1, 13, 13, 8, 8),  # one head
    (1, 4, 2, 9, 33, 8, 6),  # grouped query heads, dv != d
    (1, 12, 12, 128, 128, 32, 32),  # the BERT encoder's heads
])
@pytest.mark.parametrize("outputs", [1, 4])
def test_packed_heads_take_the_blocked_path(shape, outputs):
    b, hq, hkv, *_ = shape
    assert _blocked(_check(_packed(*shape), q_num_heads=hq, kv_num_heads=hkv, outputs=outputs))


@pytest.mark.parametrize("attrs", [dict(is_causal=1), dict(softcap=2.0, left_window_size=2),
                                   dict(qk_matmul_output_mode=2, is_causal=1)])
@pytest.mark.parametrize("outputs", [1, 2, 3, 4])
def test_trimmed_outputs(attrs, outputs):
    """Only the leading `outputs` outputs exist; with Y alone the scores stay inside each task."""
    arrays = _qkv(1, 3, 3, 17, 23, 8, 8)
    mod = _check(arrays, outputs=outputs, **attrs)
    assert _blocked(mod)
    assert len(mod.main.body.type.fields) == outputs


def test_trimmed_outputs_with_masks_and_packed_heads():
    arrays = _packed(2, 4, 2, 7, 19, 8, 8) + [rng.random((2, 1, 7, 19)) < 0.8]
    assert _blocked(_check(arrays, q_num_heads=4, kv_num_heads=2, outputs=1, is_causal=1))
    arrays = _qkv(2, 3, 3, 7, 19, 8, 8) + [_r(7, 19)]
    _check(arrays, outputs=1)


@pytest.mark.parametrize("config", [{"attention.rows": 8}, {"attention.rows": 2}, {"attention.unroll_head": 0}])
def test_tile_knobs_with_y_alone(config):
    arrays = _qkv(1, 2, 2, 19, 40, 8, 8)
    with applying(config):
        _check(arrays, is_causal=1, outputs=1)


@pytest.mark.parametrize("config", [{"attention.query_block": 4}, {"attention.query_block": 64},
                                    {"attention.score_run": 16}])
def test_knobs(config):
    arrays = _qkv(1, 2, 2, 19, 40, 8, 8)
    with applying(config):
        _check(arrays, is_causal=1)


@pytest.mark.parametrize("outputs", [1, 4])
def test_wide_logit_range(outputs):
    """Large scores: softmax terms from e^0 down past e^-87 (flushed to 0) in every row."""
    arrays = _qkv(1, 2, 2, 9, 37, 16, 16)
    arrays[0] *= 6.0
    _check(arrays, scale=1.0, outputs=outputs)


@pytest.mark.parametrize("vector_bytes, rows, width, dtype, queries, expect", [
    (32, 4, 32, "float32", 16, 2),  # AVX2, BERT's 32-wide tiles: 3 rows fit 12 accumulators, 2 divide 16
    (32, 4, 16, "float32", 16, 4),  # two vectors a row: the 4 rows fit
    (32, 4, 32, "float64", 16, 1),  # eight float64 vectors a row: one row
    (64, 8, 32, "float32", 16, 8),  # AVX-512: 16 accumulators of 24
    (64, 8, 64, "float32", 16, 4),  # a 64-wide head: 6 rows fit, 4 divide 16
    (32, 2, 8, "float32", 7, 2),  # a prime query count: the limit itself, the last tile guarded
])
def test_tile_rows_fit_the_accumulator_budget(vector_bytes, rows, width, dtype, queries, expect):
    from kiln.target import Target
    from kiln.tir import IntImm
    from kiln.topi import x86_attention

    target = Target.parse(f"c -vector-bits={vector_bytes * 8}")
    assert x86_attention.tile_rows(rows, width, dtype, IntImm(queries), target) == expect


def test_bert_heads_tiles_stay_in_registers():
    """The scores' and P V's register tiles of 32-wide heads hold at most the host's accumulator budget (on
    AVX2 4 rows x 4 vectors spilled one accumulator to the stack every step)."""
    import re

    from kiln.target import Target
    from kiln.topi import x86_attention

    arrays = _qkv(1, 4, 4, 32, 32, 32, 32)
    mod = op_module(OP, arrays)
    kernels, _, _ = lower_groups(fuse(mod))
    code = generate([k.func for k in kernels]).code
    vector_bytes = Target.host().vector_bytes
    budget = (x86_attention.ACCUMULATORS_WIDE if vector_bytes >= 64 else x86_attention.ACCUMULATORS) * vector_bytes // 4
    sizes = [int(n) for n in re.findall(r"float (?:attn_fast_scores_local|attn_fast_ctx)\[(\d+)\]", code)]
    assert len(sizes) == 2 and all(n <= budget for n in sizes), sizes
    run_compiled(mod, [arrays], OP)
