"""Control flow operators: Loop and Scan.

Argument 0 is the body, a Function; the type relation sees its FuncType and the reference gets a
callable that it calls once per iteration (a real loop: trip counts may be decided at run time).
If is not an operator: it is the IR node `kiln.ir.If`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kiln.errors import EvaluationError, TypeInferenceError
from kiln.ir import dtype as dt
from kiln.ir.types import ANY, Dim, FuncType, OptionalType, TensorType, TupleType, Type, compatible, join
from kiln.op.registry import OPAQUE, define_op
from kiln.op.typerel import check_dtype, norm_axis, tensor


def join_carried(a: Type, b: Type) -> Type:
    """The type covering both a loop-carried value's initial type and the body's result type.

    An ONNX body may return the element of an optional it was given (Loop-16), so T and
    Optional[T] join to Optional[T]."""
    if isinstance(a, OptionalType) != isinstance(b, OptionalType):
        inner_a = a.elem if isinstance(a, OptionalType) else a
        inner_b = b.elem if isinstance(b, OptionalType) else b
        return OptionalType(join_carried(inner_a, inner_b))
    try:
        return join(a, b)
    except ValueError as e:
        raise TypeInferenceError(f"loop-carried value changes type: {e}") from None


def flows_into(param: Type, actual: Type) -> bool:
    """True when a value of type `actual` may be passed for a body parameter of type `param`."""
    if isinstance(param, OptionalType) and not isinstance(actual, OptionalType):
        return compatible(param.elem, actual)
    return compatible(param, actual)


def body_type(t: Type | None, n_params: int, min_results: int) -> FuncType:
    """The body's FuncType, checked for its parameter count and a minimum number of results."""
    if not isinstance(t, FuncType) or not isinstance(t.ret, TupleType):
        raise TypeInferenceError(f"the body must be a function returning a tuple, got {t}")
    if len(t.params) != n_params:
        raise TypeInferenceError(f"the body takes {len(t.params)} parameters; expected {n_params}")
    if len(t.ret.fields) < min_results:
        raise TypeInferenceError(f"the body returns {len(t.ret.fields)} values; expected at least {min_results}")
    return t


def check_params(body: FuncType, start: int, actual: Sequence[Type], what: str) -> None:
    for i, a in enumerate(actual):
        if not flows_into(body.params[start + i], a):
            raise TypeInferenceError(f"{what} {i} has type {a}; the body expects {body.params[start + i]}")


def check_scalar(t: Type | None, dtypes: tuple[str, ...], what: str) -> TensorType:
    """A single-element tensor (ONNX allows shape () or (1,) for trip counts and conditions)."""
    t = tensor(t, what)
    check_dtype(t, dtypes, what)
    if t.shape is not None and any(isinstance(d, int) and d != 1 for d in t.shape):
        raise TypeInferenceError(f"{what} must hold one element, got shape {t.shape}")
    return t


def stacked(elem: Type, length: Dim, axis: int, what: str) -> TensorType:
    """Type of per-iteration tensors of type `elem` stacked along a new `axis`."""
    elem = tensor(elem, what)
    if elem.shape is None:
        return TensorType(None, elem.dtype)
    axis = norm_axis(axis, len(elem.shape) + 1, f"{what} axis")
    return TensorType(elem.shape[:axis] + (length,) + elem.shape[axis:], elem.dtype)


def truth(v: Any) -> bool:
    return bool(np.asarray(v).reshape(-1)[0])


def result_types(body: Callable) -> tuple[Type, ...]:
    """The body's declared result types (to shape empty stacks when a loop runs zero times).
    NOTE: the interpreter's Closure exposes its Function as `.fn`."""
    return body.type.ret.fields


def stack(elems: list[np.ndarray], axis: int, elem_type: Type) -> np.ndarray:
    """Stack per-iteration values along a new axis; zero iterations give an empty tensor."""
    if elems:
        return np.stack(elems, axis=axis)
    t = tensor(elem_type)
    shape = tuple(d if isinstance(d, int) else 0 for d in (t.shape or ()))
    axis = axis % (len(shape) + 1)
    return np.zeros(shape[:axis] + (0,) + shape[axis:], dt.to_numpy(t.dtype))


# ---------------------------------------------------------------------------------------------
# Loop


def _loop_rel(attrs, types, values) -> TupleType:
    padded = list(types) + [None] * (3 - len(types))
    trip, cond, init = padded[1], padded[2], types[3:]
    n = len(init)
    body = body_type(types[0], 2 + n, 1 + n)
    if trip is not None:
        check_scalar(trip, ("int64",), "trip count M")
    if cond is not None:
        check_scalar(cond, ("bool",), "condition")
    check_scalar(body.ret.fields[0], ("bool",), "the body's condition result")
    check_params(body, 2, init, "loop-carried input")
    carried = [join_carried(i, o) for i, o in zip(init, body.ret.fields[1:1 + n])]
    known = trip is not None and cond is None and values[1] is not None
    length = int(np.asarray(values[1]).reshape(-1)[0]) if known else ANY
    scans = [stacked(t, length, 0, f"scan output {k}") for k, t in enumerate(body.ret.fields[1 + n:])]
    return TupleType(tuple(carried + scans))


def _loop_ref(attrs, body, trip_count=None, cond=None, *init):
    """Run the body while the condition holds and fewer than M iterations ran.

    Without a condition input the body's condition result is ignored (a plain for loop)."""
    limit = None if trip_count is None else int(np.asarray(trip_count).reshape(-1)[0])
    running = True if cond is None else truth(cond)
    n, carried, steps, i = len(init), list(init), [], 0
    while running and (limit is None or i < limit):
        out = body(np.array(i, np.int64), np.array(running), *carried)
        if cond is not None:
            running = truth(out[0])
        carried = list(out[1:1 + n])
        steps.append(out[1 + n:])
        i += 1
    kinds = result_types(body)[1 + n:]
    scans = [stack([s[k] for s in steps], 0, t) for k, t in enumerate(kinds)]
    return tuple(carried) + tuple(scans)


loop = define_op("control.loop", host_only=True, pattern=OPAQUE, inputs=(1, None), infer=_loop_rel, ref=_loop_ref,
                 doc="Loop(body, M?, cond?, carried...): ONNX Loop; results are the final carried "
                     "values then the per-iteration scan outputs stacked along a new axis 0.")


# ---------------------------------------------------------------------------------------------
# Scan


@dataclass(frozen=True)
class ScanAttrs:
    """Axes/directions default to all zeros (None)."""

    num_scan_inputs: int
    scan_input_axes: tuple[int, ...] | None = None
    scan_input_directions: tuple[int, ...] | None = None
    scan_output_axes: tuple[int, ...] | None = None
    scan_output_directions: tuple[int, ...] | None = None


def per_value(attr: tuple[int, ...] | None, count: int, what: str) -> tuple[int, ...]:
    """An ONNX per-input/output attribute list, defaulting to zeros."""
    if attr is None:
        return (0,) * count
    if len(attr) != count:
        raise TypeInferenceError(f"{what} has {len(attr)} entries; expected {count}")
    return tuple(attr)


def _scan_length(xs: Sequence[TensorType], axes: Sequence[int]) -> Dim:
    """The common length of the scan inputs along their scan axes."""
    length: Dim = ANY
    for i, (x, a) in enumerate(zip(xs, axes)):
        if x.shape is None:
            continue
        d = x.shape[norm_axis(a, len(x.shape), f"scan input {i} axis")]
        if isinstance(d, int) and isinstance(length, int) and d != length:
            raise TypeInferenceError(f"scan inputs have lengths {length} and {d} along their scan axes")
        if length == ANY or isinstance(d, int):
            length = d
    return length


def _scan_rel(attrs: ScanAttrs, types, values) -> TupleType:
    m = attrs.num_scan_inputs
    n = len(types) - 1 - m
    if m < 1 or n < 0:
        raise TypeInferenceError(f"num_scan_inputs={m} does not fit {len(types) - 1} inputs")
    states = types[1:1 + n]
    xs = [tensor(t, f"scan input {i}") for i, t in enumerate(types[1 + n:])]
    body = body_type(types[0], n + m, n)
    k = len(body.ret.fields) - n
    in_axes = per_value(attrs.scan_input_axes, m, "scan_input_axes")
    per_value(attrs.scan_input_directions, m, "scan_input_directions")
    out_axes = per_value(attrs.scan_output_axes, k, "scan_output_axes")
    per_value(attrs.scan_output_directions, k, "scan_output_directions")
    check_params(body, 0, states, "state input")
    length = _scan_length(xs, in_axes)
    finals = [join_carried(s, o) for s, o in zip(states, body.ret.fields[:n])]
    scans = [stacked(t, length, a, f"scan output {j}") for j, (t, a) in enumerate(zip(body.ret.fields[n:], out_axes))]
    return TupleType(tuple(finals + scans))


def _scan_ref(attrs: ScanAttrs, body, *args):
    """Iterate over slices of the scan inputs, threading the states through the body."""
    m = attrs.num_scan_inputs
    n = len(args) - m
    states, xs = list(args[:n]), args[n:]
    in_axes = [a % x.ndim for a, x in zip(per_value(attrs.scan_input_axes, m, ""), xs)]
    in_dirs = per_value(attrs.scan_input_directions, m, "")
    length = xs[0].shape[in_axes[0]]
    steps = []
    for t in range(length):
        slices = [np.take(x, length - 1 - t if d else t, axis=a) for x, a, d in zip(xs, in_axes, in_dirs)]
        out = body(*states, *slices)
        states = list(out[:n])
        steps.append(out[n:])
    kinds = result_types(body)[n:]
    out_axes = per_value(attrs.scan_output_axes, len(kinds), "")
    out_dirs = per_value(attrs.scan_output_directions, len(kinds), "")
    scans = []
    for j, (t, a, d) in enumerate(zip(kinds, out_axes, out_dirs)):
        elems = [s[j] for s in steps]
        scans.append(stack(elems[::-1] if d else elems, a, t))
    return tuple(states) + tuple(scans)


scan = define_op("control.scan", host_only=True, pattern=OPAQUE, attrs=ScanAttrs, inputs=(2, None), infer=_scan_rel,
                 ref=_scan_ref,
                 doc="Scan(body, states..., scan_inputs...) (ONNX Scan-9+): results are the final "
                     "states then the per-iteration outputs stacked along scan_output_axes.")


# ---------------------------------------------------------------------------------------------
# guard: an If whose other branch cannot type-check


@dataclass(frozen=True)
class GuardAttrs:
    expect: int
    message: str = ""


def _guard_rel(attrs: GuardAttrs, types, values) -> Type:
    check_scalar(types[0], ("bool",), "condition")
    return types[1]


def _guard_ref(attrs: GuardAttrs, cond, value):
    if truth(cond) != bool(attrs.expect):
        raise EvaluationError(f"the branch taken cannot run on these inputs: {attrs.message}")
    return value


guard = define_op("control.guard", pattern=OPAQUE, attrs=GuardAttrs, inputs=2, infer=_guard_rel, ref=_guard_ref,
                  host_only=True,
                  doc="`value` when the condition equals `expect`, else an error. An ONNX If whose other "
                      "branch fails type inference for the static input types becomes a guard.")
