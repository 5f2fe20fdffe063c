"""Sequences and optionals: the container values of ONNX.

A sequence is a run-time Python list of tensors (type SeqType, whose element type covers every
element); an optional is its value or None (type OptionalType).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kiln.errors import TypeInferenceError
from kiln.ir.types import ANY, Dim, OptionalType, SeqType, TensorType, TupleType, Type, join
from kiln.op.control import body_type, check_params, check_scalar, result_types
from kiln.op.registry import INJECTIVE, OPAQUE, define_op
from kiln.op.typerel import norm_axis, tensor

POSITION = ("int32", "int64")


def seq(t: Type | None, what: str = "input") -> SeqType:
    if not isinstance(t, SeqType):
        raise TypeInferenceError(f"{what} must be a sequence, got {t}")
    return t


def elem_join(a: Type, b: Type, what: str) -> Type:
    """Element type covering both; sequences hold tensors of one dtype."""
    try:
        return join(a, b)
    except ValueError:
        raise TypeInferenceError(f"{what}: element types {a} and {b} do not agree") from None


def position(p, n: int, allow_end: bool) -> int:
    """A checked, non-negative sequence position (insertion may also name the end, n)."""
    i = int(np.asarray(p).reshape(-1)[0])
    hi = n if allow_end else n - 1
    if not -n <= i <= hi:
        raise IndexError(f"position {i} out of range for a sequence of length {n}")
    return i + n if i < 0 else i


# ---------------------------------------------------------------------------------------------
# construction and access


def _construct_rel(attrs, types, values) -> SeqType:
    elem = tensor(types[0], "input 0")
    for i, t in enumerate(types[1:], 1):
        elem = elem_join(elem, tensor(t, f"input {i}"), "SequenceConstruct")
    return SeqType(elem)


construct = define_op("seq.construct", host_only=True, pattern=OPAQUE, inputs=(1, None), infer=_construct_rel,
                      ref=lambda a, *xs: list(xs), doc="A sequence of the input tensors, in order.")


@dataclass(frozen=True)
class SequenceEmptyAttrs:
    dtype: str = "float32"


empty = define_op("seq.empty", host_only=True, pattern=OPAQUE, inputs=0, attrs=SequenceEmptyAttrs,
                  infer=lambda a, types, values: SeqType(TensorType(None, a.dtype)),
                  ref=lambda a: [], doc="An empty sequence of `dtype` tensors.")


def _at_rel(attrs, types, values) -> Type:
    check_scalar(types[1], POSITION, "position")
    return seq(types[0]).elem


at = define_op("seq.at", host_only=True, pattern=OPAQUE, inputs=2, infer=_at_rel,
               ref=lambda a, s, p: s[position(p, len(s), False)],
               doc="The element at `position` (negative counts from the back).")


def _insert_rel(attrs, types, values) -> SeqType:
    s = seq(types[0])
    if len(types) > 2 and types[2] is not None:
        check_scalar(types[2], POSITION, "position")
    return SeqType(elem_join(s.elem, tensor(types[1], "tensor"), "SequenceInsert"))


def _insert_ref(attrs, s, x, p=None):
    at_ = len(s) if p is None else position(p, len(s), True)
    return s[:at_] + [x] + s[at_:]


insert = define_op("seq.insert", host_only=True, pattern=OPAQUE, inputs=(2, 3), infer=_insert_rel, ref=_insert_ref,
                   doc="A new sequence with `tensor` inserted before `position` (default: appended).")


def _erase_rel(attrs, types, values) -> SeqType:
    if len(types) > 1 and types[1] is not None:
        check_scalar(types[1], POSITION, "position")
    return seq(types[0])


def _erase_ref(attrs, s, p=None):
    if not s:
        raise IndexError("cannot erase from an empty sequence")
    at_ = len(s) - 1 if p is None else position(p, len(s), False)
    return s[:at_] + s[at_ + 1:]


erase = define_op("seq.erase", host_only=True, pattern=OPAQUE, inputs=(1, 2), infer=_erase_rel, ref=_erase_ref,
                  doc="A new sequence without the element at `position` (default: the last).")


def _length_rel(attrs, types, values) -> TensorType:
    seq(types[0])
    return TensorType((), "int64")


length = define_op("seq.length", host_only=True, pattern=OPAQUE, infer=_length_rel,
                   ref=lambda a, s: np.array(len(s), np.int64), doc="Number of elements, int64 scalar.")


# ---------------------------------------------------------------------------------------------
# tensor <-> sequence


@dataclass(frozen=True)
class SplitToSequenceAttrs:
    axis: int = 0
    keepdims: int = 1


def _split_part(split: TensorType | None, value: np.ndarray | None, dim: Dim) -> Dim:
    """Size of every part along the split axis when all parts agree, else ANY."""
    if split is None:
        return 1
    if value is None:
        return ANY
    sizes = np.asarray(value).reshape(-1)
    if np.asarray(value).ndim == 0:
        k = int(sizes[0])
        return k if isinstance(dim, int) and dim % k == 0 else ANY
    return int(sizes[0]) if sizes.size and np.all(sizes == sizes[0]) else ANY


def _split_rel(attrs: SplitToSequenceAttrs, types, values) -> SeqType:
    x = tensor(types[0])
    split = types[1] if len(types) > 1 else None
    if split is not None:
        tensor(split, "split")
        if split.dtype not in POSITION or (split.shape is not None and len(split.shape) > 1):
            raise TypeInferenceError(f"split must be an int32/int64 scalar or 1-D tensor, got {split}")
    if x.shape is None:
        return SeqType(TensorType(None, x.dtype))
    axis = norm_axis(attrs.axis, len(x.shape))
    part = _split_part(split, values[1] if len(values) > 1 else None, x.shape[axis])
    if split is None and not attrs.keepdims:
        return SeqType(TensorType(x.shape[:axis] + x.shape[axis + 1:], x.dtype))
    return SeqType(TensorType(x.shape[:axis] + (part,) + x.shape[axis + 1:], x.dtype))


def _split_ref(attrs: SplitToSequenceAttrs, x, split=None):
    axis = attrs.axis % x.ndim
    n = x.shape[axis]
    if split is None:
        parts = np.split(x, n, axis=axis)
        return [p.squeeze(axis) for p in parts] if not attrs.keepdims else parts
    sizes = np.asarray(split).astype(np.int64)
    if sizes.ndim == 0:
        k = int(sizes)
        if k <= 0:
            raise ValueError(f"split must be positive, got {k}")
        sizes = np.array([k] * (n // k) + ([n % k] if n % k else []), np.int64)
    if sizes.sum() != n or np.any(sizes < 0):
        raise ValueError(f"split sizes {sizes.tolist()} do not sum to dim {n}")
    return np.split(x, np.cumsum(sizes)[:-1], axis=axis)


split_to_sequence = define_op(
    "seq.split_to_sequence", host_only=True, pattern=OPAQUE, inputs=(1, 2), attrs=SplitToSequenceAttrs,
    infer=_split_rel, ref=_split_ref,
    doc="Split along `axis` into a sequence: parts of size 1 (axis dropped unless keepdims), of "
        "size `split` (a scalar; the last part may be shorter) or of the listed sizes.")


@dataclass(frozen=True)
class ConcatFromSequenceAttrs:
    axis: int
    new_axis: int = 0


def _concat_rel(attrs: ConcatFromSequenceAttrs, types, values) -> TensorType:
    elem = tensor(seq(types[0]).elem, "sequence element")
    if elem.shape is None:
        return TensorType(None, elem.dtype)
    rank = len(elem.shape) + (1 if attrs.new_axis else 0)
    axis = norm_axis(attrs.axis, rank)
    if attrs.new_axis:
        return TensorType(elem.shape[:axis] + (ANY,) + elem.shape[axis:], elem.dtype)
    return TensorType(elem.shape[:axis] + (ANY,) + elem.shape[axis + 1:], elem.dtype)


def _concat_ref(attrs: ConcatFromSequenceAttrs, s):
    if not s:
        raise ValueError("cannot concatenate an empty sequence")
    if attrs.new_axis:
        return np.stack(s, axis=attrs.axis)
    return np.concatenate(s, axis=attrs.axis)


concat_from_sequence = define_op(
    "seq.concat_from_sequence", host_only=True, pattern=INJECTIVE, attrs=ConcatFromSequenceAttrs, infer=_concat_rel,
    ref=_concat_ref, doc="Concatenate the elements along `axis` (stack along a new axis if new_axis).")


# ---------------------------------------------------------------------------------------------
# SequenceMap


def _map_rel(attrs, types, values) -> TupleType:
    seq(types[1], "input sequence")
    args = [t.elem if isinstance(t, SeqType) else tensor(t, f"input {i + 1}") for i, t in enumerate(types[1:])]
    body = body_type(types[0], len(args), 1)
    check_params(body, 0, args, "input")
    return TupleType(tuple(SeqType(r) for r in body.ret.fields))


def _map_ref(attrs, body, *inputs):
    """Call the body on the i-th element of every sequence input (tensor inputs as they are)."""
    n = len(inputs[0])
    if any(isinstance(s, list) and len(s) != n for s in inputs):
        raise ValueError(f"input sequences have different lengths {[len(s) for s in inputs if isinstance(s, list)]}")
    results = [body(*(s[i] if isinstance(s, list) else s for s in inputs)) for i in range(n)]
    k = len(result_types(body))
    return tuple([r[j] for r in results] for j in range(k))


map_ = define_op("seq.map", host_only=True, pattern=OPAQUE, inputs=(2, None), infer=_map_rel, ref=_map_ref,
                 doc="SequenceMap(body, sequence, more sequences or tensors...): one output "
                     "sequence per body result.")


# ---------------------------------------------------------------------------------------------
# optionals


@dataclass(frozen=True)
class OptionalAttrs:
    type: Type | None = None


def _optional_rel(attrs: OptionalAttrs, types, values) -> OptionalType:
    if types and types[0] is not None:
        if attrs.type is not None and attrs.type != types[0]:
            raise TypeInferenceError(f"input type {types[0]} differs from the attribute type {attrs.type}")
        return OptionalType(types[0])
    if attrs.type is None:
        raise TypeInferenceError("an empty optional needs the `type` attribute")
    return OptionalType(attrs.type)


optional = define_op("optional.optional", host_only=True, pattern=OPAQUE, inputs=(0, 1), attrs=OptionalAttrs,
                     infer=_optional_rel, ref=lambda a, x=None: x,
                     doc="An optional holding the input, or an empty optional of `type`.")


def _has_element_rel(attrs, types, values) -> TensorType:
    if types and types[0] is not None and not isinstance(types[0], (TensorType, SeqType, OptionalType)):
        raise TypeInferenceError(f"input must be an optional, tensor or sequence, got {types[0]}")
    return TensorType((), "bool")


has_element = define_op("optional.has_element", host_only=True, pattern=OPAQUE, inputs=(0, 1), infer=_has_element_rel,
                        ref=lambda a, x=None: np.array(x is not None),
                        doc="Whether the optional holds a value (false for an omitted input).")


def _get_element_rel(attrs, types, values) -> Type:
    t = types[0]
    if isinstance(t, OptionalType):
        return t.elem
    if isinstance(t, (TensorType, SeqType)):
        return t
    raise TypeInferenceError(f"input must be an optional, tensor or sequence, got {t}")


def _get_element_ref(attrs, x):
    if x is None:
        raise ValueError("the optional is empty")
    return x


get_element = define_op("optional.get_element", pattern=OPAQUE, infer=_get_element_rel, ref=_get_element_ref,
                        host_only=True, doc="The optional's value (a tensor or sequence input passes through).")
