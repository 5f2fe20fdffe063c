"""Layer normalization over the last axis (kiln/topi/x86_rowwise.py) against the operator's numpy
reference, all three outputs: odd, prime and unit row lengths, no bias, every dtype and stash type,
and which calls take the row-wise path."""

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
rng = np.random.default_rng(7)
OP = "nn.layer_normalization"



def _check(shape, dtype="float32", bias=True, **attrs) -> bool:
    """Compare with the reference; whether the row-wise kernel was used."""
    np_t = to_numpy(dtype)
    n = shape[-1] if attrs.get("axis", -1) == -1 else int(np.prod(shape[attrs["axis"]:]))
    pshape = (n,) if attrs.get("axis", -1) == -1 else shape[attrs["axis"]:]
    arrays = [(rng.standard_normal(shape) * 3 + 1).astype(np_t), rng.uniform(0.5, 1.5, pshape).astype(np_t),
              rng.standard_normal(pshape).astype(np_t) if bias else None]
    mod = op_module(OP, arrays, **attrs)
    run_compiled(mod, [arrays], OP, **attrs)
    kernels, _, _ = lower_groups(fuse(mod))
    return "rows_layer_norm" in generate([k.func for k in kernels]).code


@pytest.mark.parametrize("shape", [(1, 128, 384), (3, 7), (2, 5, 1), (1, 1, 16), (4, 33), (2, 3, 4, 30)])
def test_rows_match_reference(shape):
    assert _check(shape, epsilon=1e-5)


def test_without_bias():
    assert _check((5, 48), bias=False)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_narrow_floats(dtype):
    assert _check((6, 40), dtype)


def test_float64_stash():
    assert _check((6, 40), stash_type="float64")


def test_other_cases_take_the_general_path():
    assert not _check((6, 40), "float64")  # statistics in float64, outputs stashed in float32
    assert not _check((2, 3, 8), axis=1)  # several normalized axes


@pytest.mark.parametrize("rows", [1, 16])
def test_rows_knob(rows):
    with applying({"rowwise.rows": rows}):
        assert _check((37, 24))


SOFTMAX = "reduce.softmax"


def _softmax(x: np.ndarray, **attrs) -> bool:
    mod = op_module(SOFTMAX, [x], **attrs)
    run_compiled(mod, [[x]], SOFTMAX, **attrs)
    kernels, _, _ = lower_groups(fuse(mod))
    return "rows_softmax" in generate([k.func for k in kernels]).code


@pytest.mark.parametrize("shape", [(1, 12, 128, 128), (3, 7), (13,), (2, 1), (5, 1, 48), (4, 33)])
def test_softmax_rows_match_reference(shape):
    assert _softmax((rng.standard_normal(shape) * 5).astype(np.float32), axis=-1)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_softmax_dtypes(dtype):
    assert _softmax((rng.standard_normal((6, 40)) * 5).astype(to_numpy(dtype)), axis=-1)


def test_softmax_infinities_and_nan():
    x = rng.standard_normal((5, 32)).astype(np.float32)
    x[0, 3] = np.inf
    x[1, :] = -np.inf
    x[2, 7] = np.nan
    x[3, ::2] = -np.inf
    x[4, 0] = 80.0
    assert _softmax(x, axis=-1)


def test_softmax_other_axes_take_the_general_path():
    assert not _softmax(rng.standard_normal((3, 8, 5)).astype(np.float32), axis=1)
