"""Linear algebra: matrix products (MatMul, Gemm, MatMulInteger, packed dense), Einsum and Det."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kiln.errors import TypeInferenceError
from kiln.ir import dtype as dt
from kiln.ir.types import ANY, Dim, TensorType
from kiln.op.reduce import unify_dim, wide
from kiln.op.registry import OPAQUE, OUT_EWISE_FUSABLE, define_op
from kiln.op.typerel import broadcast_shapes, check_dtype, same_dtype, tensor


def matmul_shape(a: tuple[Dim, ...] | None, b: tuple[Dim, ...] | None) -> tuple[Dim, ...] | None:
    """numpy.matmul's shape rule: 1-D operands gain (and lose) a unit dim, batch dims broadcast."""
    if a is None or b is None:
        return None
    if not a or not b:
        raise TypeInferenceError(f"matmul operands must have rank >= 1, got shapes {a} and {b}")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    unify_dim(a2[-1], b2[-2], f"inner dims of shapes {a} and {b} differ")
    batch = broadcast_shapes(a2[:-2], b2[:-2])
    return batch + a2[-2:-1] * (len(a) > 1) + b2[-1:] * (len(b) > 1)


def _matmul_rel(attrs, types, values) -> TensorType:
    a, b = tensor(types[0], "A"), tensor(types[1], "B")
    dtype = same_dtype([a, b], "A and B")
    check_dtype(a, dt.NUMERIC, "A")
    return TensorType(matmul_shape(a.shape, b.shape), dtype)


mat_mul = define_op("linalg.mat_mul", pattern=OUT_EWISE_FUSABLE, inputs=2, infer=_matmul_rel,
                    ref=lambda attrs, a, b: np.matmul(wide(a), wide(b)).astype(a.dtype),
                    doc="numpy.matmul: batched matrix product with 1-D operands and batch broadcasting.")


# ---------------------------------------------------------------------------------------------
# Gemm


@dataclass(frozen=True)
class GemmAttrs:
    alpha: float = 1.0
    beta: float = 1.0
    transA: int = 0
    transB: int = 0


def _check_unidirectional(c: tuple[Dim, ...], target: tuple[Dim, ...]) -> None:
    """C must broadcast to `target` without changing it (ONNX unidirectional broadcasting)."""
    if len(c) > len(target):
        raise TypeInferenceError(f"C of shape {c} does not broadcast to {target}")
    for cd, td in zip(c[::-1], target[::-1]):
        if cd != 1 and isinstance(cd, int) and isinstance(td, int) and cd != td:
            raise TypeInferenceError(f"C of shape {c} does not broadcast to {target}")


def _gemm_rel(attrs, types, values) -> TensorType:
    a, b = tensor(types[0], "A"), tensor(types[1], "B")
    c = tensor(types[2], "C") if len(types) > 2 and types[2] is not None else None
    dtype = same_dtype([a, b] + ([c] if c else []), "A, B and C")
    check_dtype(a, dt.NUMERIC, "A")
    for t, name in ((a, "A"), (b, "B")):
        if t.ndim not in (None, 2):
            raise TypeInferenceError(f"{name} must be 2-D, got {t}")
    sa = a.shape if a.shape is not None else (ANY, ANY)
    sb = b.shape if b.shape is not None else (ANY, ANY)
    (m, k), (k2, n) = sa[::-1] if attrs.transA else sa, sb[::-1] if attrs.transB else sb
    unify_dim(k, k2, f"inner dims of A {a} and B {b} (transA={attrs.transA}, transB={attrs.transB})")
    if c is not None and c.shape is not None:
        _check_unidirectional(c.shape, (m, n))
    return TensorType((m, n), dtype)


def _gemm_ref(attrs, a, b, c=None):
    a2, b2 = wide(a), wide(b)
    y = (a2.T if attrs.transA else a2) @ (b2.T if attrs.transB else b2)
    y = y * attrs.alpha if attrs.alpha != 1.0 else y
    if c is not None:
        y = y + (wide(c) * attrs.beta if attrs.beta != 1.0 else wide(c))
    return np.asarray(y).astype(a.dtype)


gemm = define_op("linalg.gemm", pattern=OUT_EWISE_FUSABLE, attrs=GemmAttrs, inputs=(2, 3),
                 infer=_gemm_rel, ref=_gemm_ref,
                 doc="alpha * A' @ B' + beta * C on 2-D A, B (' = transposed when transA/transB).")


# ---------------------------------------------------------------------------------------------
# MatMulInteger


def _matmul_integer_rel(attrs, types, values) -> TensorType:
    a, b = tensor(types[0], "A"), tensor(types[1], "B")
    check_dtype(a, ("int8", "uint8"), "A")
    check_dtype(b, ("int8", "uint8"), "B")
    for i, (x, name) in enumerate(((a, "a_zero_point"), (b, "b_zero_point")), start=2):
        zp = types[i] if len(types) > i else None
        if zp is not None:
            check_dtype(tensor(zp, name), (x.dtype,), name)
            if zp.ndim is not None and x.ndim is not None and zp.ndim > max(x.ndim, 1):
                raise TypeInferenceError(f"{name} {zp} has a higher rank than its operand {x}")
    return TensorType(matmul_shape(a.shape, b.shape), "int32")


def _matmul_integer_ref(attrs, a, b, a_zero_point=None, b_zero_point=None):
    """(A - a_zp) @ (B - b_zp) in int32; a 1-D a_zp of length M is per row of A."""
    a32, b32 = a.astype(np.int32), b.astype(np.int32)
    if a_zero_point is not None:
        azp = a_zero_point.astype(np.int32)
        if azp.ndim == 1 and a.ndim >= 2:
            azp = azp[:, None]
        a32 = a32 - azp
    if b_zero_point is not None:
        b32 = b32 - b_zero_point.astype(np.int32)
    return np.matmul(a32, b32).astype(np.int32)


mat_mul_integer = define_op("linalg.mat_mul_integer", pattern=OUT_EWISE_FUSABLE, inputs=(2, 4),
                            infer=_matmul_integer_rel, ref=_matmul_integer_ref,
                            doc="int32 matmul of 8-bit integers after subtracting zero points.")


# ---------------------------------------------------------------------------------------------
# Einsum


@dataclass(frozen=True)
class EinsumAttrs:
    equation: str


def split_equation(equation: str) -> tuple[list[str], str]:
    """Operand terms and the explicit output term (implicit mode: labels seen once, ASCII order,
    after an ellipsis if any operand has one)."""
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    for term in terms + [out]:
        body = term.replace("...", "", 1)
        if not all(ch.isascii() and ch.isalpha() for ch in body):
            raise TypeInferenceError(f"einsum equation {equation!r}: bad term {term!r}")
    if not arrow:
        letters = "".join(terms).replace("...", "")
        once = sorted(ch for ch in set(letters) if letters.count(ch) == 1)
        out = ("..." if any("..." in t for t in terms) else "") + "".join(once)
    if len(set(out.replace("...", ""))) != len(out.replace("...", "")):
        raise TypeInferenceError(f"einsum equation {equation!r}: output repeats a label")
    return terms, out


def _einsum_rel(attrs, types, values) -> TensorType:
    xs = [tensor(t, f"input {i}") for i, t in enumerate(types)]
    dtype = same_dtype(xs, "einsum inputs")
    check_dtype(xs[0], dt.NUMERIC, "inputs")
    terms, out = split_equation(attrs.equation)
    if len(terms) != len(xs):
        raise TypeInferenceError(f"equation {attrs.equation!r} has {len(terms)} terms for {len(xs)} inputs")
    dims: dict[str, Dim] = {}
    ellipses: list[tuple[Dim, ...] | None] = []
    for term, x in zip(terms, xs):
        pre, ell, post = term.partition("...")
        labels = pre + post
        if x.shape is None:
            ellipses += [None] if ell else []
            continue
        if len(x.shape) < len(labels) or (not ell and len(x.shape) != len(labels)):
            raise TypeInferenceError(f"term {term!r} does not fit input of shape {x.shape}")
        inner = x.shape[len(pre):len(x.shape) - len(post)]
        ellipses += [inner] if ell else []
        for ch, d in zip(labels, x.shape[:len(pre)] + x.shape[len(x.shape) - len(post):]):
            dims[ch] = unify_dim(dims.get(ch, d), d, f"einsum label {ch!r}")
    pre, ell, post = out.partition("...")
    missing = set(pre + post) - set("".join(terms))
    if missing or (ell and not any("..." in t for t in terms)):
        raise TypeInferenceError(f"equation {attrs.equation!r}: output labels not in any input")
    if len({len(e) for e in ellipses if e is not None}) > 1:
        raise TypeInferenceError(f"equation {attrs.equation!r}: every '...' must stand for as many dims, "
                                 f"got {' and '.join(str(e) for e in ellipses)}")
    batch = broadcast_shapes(*ellipses) if ell else ()
    if batch is None:
        return TensorType(None, dtype)
    return TensorType(tuple(dims.get(ch, ANY) for ch in pre) + batch + tuple(dims.get(ch, ANY) for ch in post),
                      dtype)


def _einsum_ref(attrs, *xs):
    terms, out = split_equation(attrs.equation)
    return np.asarray(np.einsum(",".join(terms) + "->" + out, *(wide(x) for x in xs))).astype(xs[0].dtype)


einsum = define_op("linalg.einsum", pattern=OUT_EWISE_FUSABLE, attrs=EinsumAttrs, inputs=(1, None),
                   infer=_einsum_rel, ref=_einsum_ref,
                   doc="Einstein summation (ellipsis broadcasting, repeated labels take diagonals).")


# ---------------------------------------------------------------------------------------------
# Det


def _det_rel(attrs, types, values) -> TensorType:
    x = tensor(types[0], "X")
    check_dtype(x, dt.FLOATS, "X")
    if x.shape is None:
        return TensorType(None, x.dtype)
    if len(x.shape) < 2:
        raise TypeInferenceError(f"X must be [*, M, M], got {x}")
    unify_dim(x.shape[-2], x.shape[-1], f"X {x} is not square")
    return TensorType(x.shape[:-2], x.dtype)


det = define_op("linalg.det", pattern=OPAQUE, infer=_det_rel,
                ref=lambda attrs, x: np.asarray(np.linalg.det(wide(x))).astype(x.dtype),
                doc="Determinant of each [M, M] matrix in the trailing two dims.")


# ---------------------------------------------------------------------------------------------
# DensePacked: a matrix product whose constant B is packed in column panels (pack-dense's output)


@dataclass(frozen=True)
class DensePackedAttrs:
    units: int  # N, the columns of the product (the panels may be zero-padded past it)


def unpack_panels(w: np.ndarray, units: int) -> np.ndarray:
    """The [K, N] matrix of a [N/nr, K, nr] panel-packed weight (padding columns dropped)."""
    nb, k, nr = w.shape
    return w.transpose(1, 0, 2).reshape(k, nb * nr)[:, :units]


def _dense_packed_rel(attrs, types, values) -> TensorType:
    a, w = tensor(types[0], "A"), tensor(types[1], "W")
    dtype = same_dtype([a, w], "A and W")
    check_dtype(a, dt.FLOATS, "A")
    if w.ndim not in (None, 3):
        raise TypeInferenceError(f"W must be packed [N/nr, K, nr], got {w}")
    if a.shape is None:
        return TensorType(None, dtype)
    if not a.shape:
        raise TypeInferenceError(f"A must have rank >= 1, got {a}")
    if w.shape is not None:
        unify_dim(a.shape[-1], w.shape[1], f"inner dims of A {a} and packed W {w}")
        nb, nr = w.shape[0], w.shape[2]
        if isinstance(nb, int) and isinstance(nr, int) and not (nb - 1) * nr < attrs.units <= nb * nr:
            raise TypeInferenceError(f"packed W {w} does not hold {attrs.units} columns")
    return TensorType(a.shape[:-1] + (attrs.units,), dtype)


dense_packed = define_op(
    "linalg.dense_packed", pattern=OUT_EWISE_FUSABLE, attrs=DensePackedAttrs, inputs=2, infer=_dense_packed_rel,
    ref=lambda attrs, a, w: np.matmul(wide(a), wide(unpack_panels(w, attrs.units))).astype(a.dtype),
    doc="A[..., K] @ W for a weight packed in column panels W[N/nr, K, nr] (zero past N): x86 dense.")
