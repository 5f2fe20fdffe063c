"""quant.qgemm compiled: the AVX2 micro-kernels run here bit-exact against numpy on odd shapes, both
activation signs and weights that saturate vpmaddubsw; the VNNI one runs where the CPU has it."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.ir import IRModule
from kiln.ir.expr import Constant, Function, Var
from kiln.ir.types import TensorType
from kiln.op import get_op
from kiln.op.qgemm import KERNELS, QGemmAttrs, pack_weight, pairs_fit_s16
from kiln.target import Target
from tests.topi.cases_int8 import qgemm_inputs

HAS_VNNI = {"avx512_vnni", "avx512bw", "avx512f"} <= Target.host().features
KERNELS_HERE = ["avx2", "avx2_split"] + (["vnni"] if HAS_VNNI else [])


def _run(inputs: list[np.ndarray], **attrs) -> tuple[np.ndarray, np.ndarray]:
    """(compiled output, reference output) of a qgemm over `inputs` (A a parameter, the rest constants)."""
    a = inputs[0]
    x = Var("a", TensorType(a.shape, a.dtype.name))
    y = get_op("quant.qgemm")(x, *(Constant(np.asarray(v)) for v in inputs[1:]), **attrs)
    got = kiln.build(IRModule({"main": Function((x,), y)})).run({"a": a})[0]
    want = get_op("quant.qgemm").reference(QGemmAttrs(**attrs), *inputs)
    return np.asarray(got), want


@pytest.mark.parametrize("kernel", KERNELS_HERE)
@pytest.mark.parametrize("a_dtype", ["uint8", "int8"])
@pytest.mark.parametrize("a_shape,n", [((1, 1), 1), ((7, 13), 19), ((2, 5, 37), 41), ((67, 64), 16)])
def test_int32_products_are_exact(kernel, a_dtype, a_shape, n):
    rng = np.random.default_rng(a_shape[-1] + n)
    inputs = qgemm_inputs(rng, a_shape, n, a_dtype, kernel, weight_range=63 if kernel == "avx2" else 127)
    got, want = _run(inputs, units=n, depth=a_shape[-1], out_dtype="int32", kernel=kernel)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kernel", KERNELS_HERE[1:])
def test_saturating_weights_stay_exact(kernel):
    """a = 255 against w = 127 pairs: vpmaddubsw alone would saturate (255 * 254 > 32767)."""
    k, n = 300, 20
    w = np.full((k, n), 127, np.int8)
    w[::3] = -128
    assert not pairs_fit_s16(w)
    a = np.full((5, k), 255, np.uint8)
    inputs = [a, pack_weight(w, KERNELS[kernel][0]), w.astype(np.int32).sum(0).astype(np.int32),
              np.asarray(0, np.uint8), np.float32(1), np.ones(n, np.float32), np.zeros(n, np.float32)]
    got, want = _run(inputs, units=n, depth=k, out_dtype="int32", kernel=kernel)
    np.testing.assert_array_equal(got, want)
    assert int(want[0, 0]) == 255 * int(w[:, 0].astype(np.int64).sum())


@pytest.mark.parametrize("out_dtype,relu", [("uint8", True), ("int8", False), ("float32", False)])
@pytest.mark.parametrize("per_channel", [True, False])
def test_requantized_outputs_within_one_lsb(out_dtype, relu, per_channel):
    rng = np.random.default_rng(5)
    inputs = qgemm_inputs(rng, (11, 29), 23, "uint8", "avx2_split", per_channel)
    got, want = _run(inputs, units=23, depth=29, out_dtype=out_dtype, relu=relu, kernel="avx2_split",
                     y_zero_point=5 if out_dtype == "uint8" else -3)
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    assert diff.max() <= (1 if out_dtype != "float32" else 1e-4 * np.abs(want).max())
    if relu:
        assert got.min() >= 5


def test_vnni_runs_where_the_cpu_has_it():
    if not HAS_VNNI:
        pytest.skip("this CPU has no AVX-512 VNNI (vpdpbusd): the VNNI kernel is checked by assembly only "
                    "(tests/codegen/test_int8_assembly.py)")
    rng = np.random.default_rng(2)
    inputs = qgemm_inputs(rng, (33, 70), 45, "int8", "vnni")
    got, want = _run(inputs, units=45, depth=70, out_dtype="int32", kernel="vnni")
    np.testing.assert_array_equal(got, want)
