"""nn.causal_conv_with_state compiled (a depthwise causal conv continuing from a state) against its
numpy reference: every dtype, with and without bias/past_state, SiLU, kernel size one, inputs
shorter than the kernel, and symbolic batch/length served by one build."""

from __future__ import annotations

import numpy as np
import pytest

from kiln.ir.dtype import to_numpy
from tests.codegen.conftest import requires_gcc
from tests.topi.compiled_op import op_module, run_compiled

pytestmark = requires_gcc
rng = np.random.default_rng(5)
OP = "nn.causal_conv_with_state"



def _r(*shape, dtype="float32"):
    return rng.standard_normal(shape).astype(to_numpy(dtype))


def _arrays(b, c, length, taps, dtype="float32", bias=True, past=True):
    return [_r(b, c, length, dtype=dtype), _r(c, 1, taps, dtype=dtype), _r(c, dtype=dtype) if bias else None,
            _r(b, c, taps - 1, dtype=dtype) if past else None]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("activation", ["none", "silu", "swish"])
def test_every_dtype_and_activation(dtype, activation):
    arrays = _arrays(2, 3, 7, 4, dtype)
    run_compiled(op_module(OP, arrays, activation=activation), [arrays], OP, activation=activation)


@pytest.mark.parametrize("b,c,length,taps,bias,past", [
    (1, 1, 1, 1, False, False),  # kernel size one: an empty state
    (1, 5, 2, 5, True, False),  # shorter than the kernel, no past: the state is zeros then the input
    (3, 2, 1, 3, False, True),  # one decode step
    (2, 7, 13, 3, True, True),
])
def test_shapes_and_optional_inputs(b, c, length, taps, bias, past):
    arrays = _arrays(b, c, length, taps, bias=bias, past=past)
    run_compiled(op_module(OP, arrays, activation="silu"), [arrays], OP, activation="silu")


def test_symbolic_batch_and_length_one_build():
    sets = [_arrays(b, 3, n, 4) for b, n in ((1, 1), (2, 9), (3, 2))]
    dims = {(0, 0): "B", (0, 2): "L", (3, 0): "B"}
    run_compiled(op_module(OP, sets[0], dims), sets, OP)
