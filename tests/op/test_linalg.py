"""Linear algebra ops: references against onnxruntime and numpy, type relations with symbolic dims."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import helper

from kiln.errors import TypeInferenceError
from kiln.frontend.onnx import from_onnx
from kiln.ir.types import ANY, SizeVar, TensorType
from kiln.op import get_op
from kiln.op.interpreter import evaluate
from kiln.op.linalg import EinsumAttrs, GemmAttrs
from tests.helpers import F, model
from tests.op.test_reduce import check_vs_ort, infer, rand

N, B = SizeVar("N"), SizeVar("B")


def f32(*shape) -> TensorType:
    return TensorType(shape, "float32")

MATMUL_SHAPES = [((3,), (3,)), ((3,), (2, 3, 5)), ((2, 7), (7, 1)), ((1, 4, 3), (5, 3, 2)),
                 ((2, 1, 3, 5), (3, 5, 1)), ((2, 3, 4, 5), (5,)), ((1, 1), (1, 1))]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_matmul_vs_ort(dtype):
    for sa, sb in MATMUL_SHAPES:
        check_vs_ort("MatMul", [rand(sa, dtype), rand(sb, dtype)], {}, 13)


def test_matmul_half_precision():
    a, b = rand((3, 64), "float32"), rand((64, 2), "float32")
    for half in (np.float16, ml_dtypes.bfloat16):
        out = get_op("linalg.mat_mul").reference(None, a.astype(half), b.astype(half))
        assert out.dtype == half
        np.testing.assert_allclose(out.astype(np.float32), a @ b, rtol=0.05, atol=0.5)


def test_matmul_type_relation():
    assert infer("linalg.mat_mul", f32(N, 3, 4), f32(4, 5)) == f32(N, 3, 5)
    assert infer("linalg.mat_mul", f32(B, 1, 3, 4), f32(N, 4, 5)) == f32(B, N, 3, 5)
    assert infer("linalg.mat_mul", f32(4), f32(N, 4, 5)) == f32(N, 5)
    assert infer("linalg.mat_mul", f32(N, 3, ANY), f32(7)) == f32(N, 3)
    assert infer("linalg.mat_mul", f32(3, 4), TensorType(None, "float32")).shape is None
    with pytest.raises(TypeInferenceError, match="inner dims"):
        infer("linalg.mat_mul", f32(3, 4), f32(5, 2))
    with pytest.raises(TypeInferenceError, match="broadcast"):
        infer("linalg.mat_mul", f32(2, 3, 4), f32(3, 4, 2))
    with pytest.raises(TypeInferenceError, match="rank"):
        infer("linalg.mat_mul", f32(), f32(3))
    with pytest.raises(TypeInferenceError, match="dtype"):
        infer("linalg.mat_mul", f32(3, 4), TensorType((4, 2), "float64"))


GEMM_ATTRS = [{}, {"transA": 1}, {"transB": 1}, {"alpha": 0.5, "beta": -2.0, "transA": 1, "transB": 1}]
GEMM_C = [None, (), (1,), (5,), (3, 1), (3, 5)]


@pytest.mark.parametrize("attrs", GEMM_ATTRS)
def test_gemm_vs_ort(attrs):
    m, k, n = 3, 7, 5
    a = rand((k, m) if attrs.get("transA") else (m, k))
    b = rand((n, k) if attrs.get("transB") else (k, n))
    for c in GEMM_C:
        check_vs_ort("Gemm", [a, b] + ([] if c is None else [rand(c)]), attrs, 13)


def test_gemm_old_opset_broadcast_attribute():
    a, b, c = rand((2, 3)), rand((3, 4)), rand((4,))
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], broadcast=1, beta=0.5)
    m = model([node], [("a", F, a.shape), ("b", F, b.shape), ("c", F, c.shape)], [("y", F, (2, 4))], opset=6)
    (y,) = evaluate(from_onnx(m), {"a": a, "b": b, "c": c})
    np.testing.assert_allclose(y, a @ b + 0.5 * c, rtol=1e-6)


def test_gemm_type_relation():
    assert infer("linalg.gemm", f32(N, 3), f32(4, 3), f32(4), attrs=GemmAttrs(transB=1)) == f32(N, 4)
    assert infer("linalg.gemm", f32(3, N), f32(3, 4), attrs=GemmAttrs(transA=1)) == f32(N, 4)
    with pytest.raises(TypeInferenceError, match="broadcast"):
        infer("linalg.gemm", f32(2, 3), f32(3, 4), f32(3,), attrs=GemmAttrs())
    with pytest.raises(TypeInferenceError, match="inner dims"):
        infer("linalg.gemm", f32(2, 3), f32(3, 4), attrs=GemmAttrs(transB=1))
    with pytest.raises(TypeInferenceError, match="2-D"):
        infer("linalg.gemm", f32(2, 2, 3), f32(3, 4), attrs=GemmAttrs())


@pytest.mark.parametrize("zero_points", [False, True])
@pytest.mark.parametrize("dtypes", [("uint8", "uint8"), ("int8", "int8"), ("uint8", "int8")])
def test_matmul_integer_vs_ort(dtypes, zero_points):
    ta, tb = dtypes
    for sa, sb in [((3, 7), (7, 5)), ((2, 3, 4), (4, 1))]:
        a, b = rand(sa, ta, lo=-128, hi=128), rand(sb, tb, lo=-128, hi=128)
        zps = [rand((), ta, lo=-128, hi=128), rand((), tb, lo=-128, hi=128)] if zero_points else []
        check_vs_ort("MatMulInteger", [a, b] + zps, {}, 10)


def test_matmul_integer_per_row_and_per_column_zero_points():
    a, b = rand((3, 4), "uint8", lo=0, hi=256), rand((4, 5), "uint8", lo=0, hi=256)
    azp, bzp = rand((3,), "uint8", lo=0, hi=256), rand((5,), "uint8", lo=0, hi=256)
    want = (a.astype(np.int64) - azp[:, None].astype(np.int64)) @ (b.astype(np.int64) - bzp.astype(np.int64))
    out = get_op("linalg.mat_mul_integer").reference(None, a, b, azp, bzp)
    assert out.dtype == np.int32 and (out == want).all()


def test_matmul_integer_type_relation():
    assert infer("linalg.mat_mul_integer", TensorType((N, 3), "uint8"), TensorType((3, 2), "int8")) == \
        TensorType((N, 2), "int32")
    with pytest.raises(TypeInferenceError, match="dtype"):
        infer("linalg.mat_mul_integer", TensorType((2, 3), "int32"), TensorType((3, 2), "int8"))
    with pytest.raises(TypeInferenceError, match="a_zero_point"):
        infer("linalg.mat_mul_integer", TensorType((2, 3), "uint8"), TensorType((3, 2), "uint8"),
              TensorType((), "int8"))


EINSUM_CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 1)]),
    ("ii->i", [(5, 5)]),
    ("ii", [(5, 5)]),
    ("...ii->...i", [(2, 3, 3)]),
    ("ij->ji", [(3, 7)]),
    ("i,i", [(7,), (7,)]),
    ("ij", [(2, 3)]),
    ("ji", [(2, 3)]),
    ("i,j->ij", [(3,), (2,)]),
    ("...ij,...jk", [(2, 1, 3, 4), (1, 5, 4, 2)]),
    ("Ab,bA->", [(3, 2), (2, 3)]),
    ("b a c, c a -> b", [(2, 3, 4), (4, 3)]),
    ("bii->b", [(2, 3, 3)]),
    (",i->i", [(), (4,)]),
]


@pytest.mark.parametrize("equation, shapes", EINSUM_CASES)
def test_einsum_vs_ort(equation, shapes):
    check_vs_ort("Einsum", [rand(s) for s in shapes], {"equation": equation}, 12, rtol=1e-4)


def test_einsum_integer_and_bfloat16():
    a, b = rand((3, 4), "int64"), rand((4, 2), "int64")
    out = get_op("linalg.einsum").reference(EinsumAttrs("ij,jk"), a, b)
    assert out.dtype == np.int64 and (out == a @ b).all()
    h = rand((2, 3)).astype(ml_dtypes.bfloat16)
    assert get_op("linalg.einsum").reference(EinsumAttrs("ij->j"), h).dtype == ml_dtypes.bfloat16


def test_einsum_type_relation():
    assert infer("linalg.einsum", f32(N, 3, 4), f32(N, 4, ANY), attrs=EinsumAttrs("bij,bjk->bik")) == f32(N, 3, ANY)
    assert infer("linalg.einsum", f32(ANY, 4), f32(4, 5), attrs=EinsumAttrs("ij,jk")) == f32(ANY, 5)
    assert infer("linalg.einsum", f32(N, 1, 3, 4), f32(1, 7, 4, 2), attrs=EinsumAttrs("...ij,...jk")) == f32(N, 7, 3, 2)
    assert infer("linalg.einsum", f32(N, N), attrs=EinsumAttrs("ii->i")) == f32(N)
    assert infer("linalg.einsum", TensorType(None, "float32"), f32(4), attrs=EinsumAttrs("ij,j->i")) == f32(ANY)
    assert infer("linalg.einsum", TensorType(None, "float32"), attrs=EinsumAttrs("...i->...")).shape is None
    with pytest.raises(TypeInferenceError, match="label 'j'"):
        infer("linalg.einsum", f32(3, 4), f32(5, 2), attrs=EinsumAttrs("ij,jk->ik"))
    with pytest.raises(TypeInferenceError, match="as many dims"):
        infer("linalg.einsum", f32(2, 3, 4), f32(4, 2), attrs=EinsumAttrs("...ij,...jk"))
    with pytest.raises(TypeInferenceError, match="terms"):
        infer("linalg.einsum", f32(3, 4), attrs=EinsumAttrs("ij,jk->ik"))
    with pytest.raises(TypeInferenceError, match="does not fit"):
        infer("linalg.einsum", f32(3, 4, 5), attrs=EinsumAttrs("ij->i"))
    with pytest.raises(TypeInferenceError, match="not in any input"):
        infer("linalg.einsum", f32(3, 4), attrs=EinsumAttrs("ij->k"))
    with pytest.raises(TypeInferenceError, match="repeats"):
        infer("linalg.einsum", f32(3, 4), attrs=EinsumAttrs("ij->ii"))
    with pytest.raises(TypeInferenceError, match="bad term"):
        infer("linalg.einsum", f32(3, 4), attrs=EinsumAttrs("i1->i"))


@pytest.mark.parametrize("shape", [(3, 3), (2, 5, 5), (1, 1), (2, 1, 4, 4)])
def test_det_vs_ort(shape):
    check_vs_ort("Det", [rand(shape)], {}, 11, rtol=1e-4)


def test_det_half_and_types():
    x = (np.eye(3) * 2).astype(np.float16)
    assert get_op("linalg.det").reference(None, x) == np.float16(8)
    assert infer("linalg.det", TensorType((N, 4, 4), "float64")) == TensorType((N,), "float64")
    assert infer("linalg.det", TensorType((ANY, N), "float32")) == TensorType((), "float32")
    with pytest.raises(TypeInferenceError, match="square"):
        infer("linalg.det", TensorType((3, 4), "float32"))
    with pytest.raises(TypeInferenceError, match="dtype"):
        infer("linalg.det", TensorType((3, 3), "int32"))
