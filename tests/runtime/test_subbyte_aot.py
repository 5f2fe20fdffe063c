"""Sub-byte tensors (int4/uint2) as intermediates and outputs of an AOT-compiled model: one byte per
element in the arena, the same values as the interpreter."""

from __future__ import annotations

import shutil

import ml_dtypes
import numpy as np
import pytest

import kiln
from kiln.codegen import CompileCache
from kiln.compiler.aot import build_aot
from kiln.ir import Constant, Function, IRModule, Tuple, Var
from kiln.ir.types import TensorType
from kiln.op import get_op

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")


def test_quantized_int4_and_uint2_through_the_arena(tmp_path):
    x = (np.random.default_rng(3).standard_normal((3, 7)) * 5).astype(np.float32)
    v = Var("x", TensorType(x.shape, "float32"))
    zp, scale = Constant(np.array(1, ml_dtypes.int4)), Constant(np.array(0.5, np.float32))
    q = get_op("tensor.transpose")(get_op("quant.quantize_linear")(v, scale, zp), perm=(1, 0))
    back = get_op("nn.relu")(get_op("quant.dequantize_linear")(q, scale, zp))
    u2 = get_op("math.cast")(get_op("math.cast")(v, to="uint2"), to="float16")
    mod = IRModule({"main": Function((v,), Tuple([q, back, u2]))})
    got = build_aot(mod, cache=CompileCache(tmp_path)).run({"x": x})
    want = kiln.evaluate(mod, {"x": x})
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g.astype(np.float64), w.astype(np.float64))
