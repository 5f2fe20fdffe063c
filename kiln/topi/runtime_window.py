"""Pad and Slice whose widths or bounds are tensors read inside the kernel at run time (a model that
computes them, like CenterCropPad's expansion). The output dims are then the call's symbolic ones,
which the executor finds from the argument values (kiln/runtime/shape_eval.py); every index is
clamped so that no runtime value makes the kernel read outside its input.

These computes, and tensor.shape / tensor.size, combine no two operands' dims, so they are marked
as correct on dims only known at run time (kiln.codegen.lower_fused checks the mark).
"""

from __future__ import annotations

from kiln import te, tir
from kiln.tir import PrimExpr, select
from kiln.topi.injective import padded_read
from kiln.topi.registry import ComputeError, const_ints, handles_runtime_dims, out_dims

handles_runtime_dims("tensor.shape", "tensor.size", "tensor.slice", "tensor.pad")


# ---------------------------------------------------------------------------------------------
# tensor.pad


def _pad_runtime_source(o: PrimExpr, b: PrimExpr, e: PrimExpr, n: PrimExpr,
                        mode: str) -> tuple[PrimExpr, PrimExpr | None]:
    """injective._pad_source with the widths (b, e) read at run time: the crop and the folding period are
    expressions, guarded so that no width makes the kernel divide by zero or read outside x."""
    zero, one = tir.const(0), tir.const(1)
    crop_b = tir.max_(zero - b, zero)
    inner = n - crop_b - tir.max_(zero - e, zero)
    s = o - tir.max_(b, zero)
    last = tir.max_(inner - 1, zero)
    if mode == "constant":
        src, ok = s, (s >= 0) & (s < inner)
    elif mode == "edge":
        src, ok = tir.min_(tir.max_(s, zero), last), None
    elif mode == "wrap":
        src, ok = s % tir.max_(inner, one), None
    else:
        p = tir.max_(2 * last, one)
        m = s % p
        src, ok = select(tir.eq(inner, one), zero, select(m >= inner, p - m, m)), None
    return tir.min_(tir.max_(src + crop_b, zero), tir.max_(n - 1, zero)), ok


def pad_runtime(attrs, inputs, out_type, consts):
    """Pad by widths known only at run time: they are read from the pads tensor inside the kernel and
    the output dims are the call's symbolic ones (the executor finds them from the argument values)."""
    x, pads, value = inputs[0], inputs[1], inputs[2]
    axes = const_ints("tensor.pad", consts, 3, "axes", required=inputs[3] is not None)
    axes = [a % x.ndim for a in axes] if axes is not None else list(range(x.ndim))
    if pads.ndim != 1:
        raise ComputeError(f"tensor.pad: pads must be 1-D, got rank {pads.ndim}")
    if isinstance(pads.shape[0], tir.IntImm) and pads.shape[0].value != 2 * len(axes):
        raise ComputeError(f"tensor.pad: pads has {pads.shape[0].value} entries for {len(axes)} axes")
    slot = {a: k for k, a in enumerate(axes)}

    def width(k: int) -> PrimExpr:
        return tir.cast("int64", pads(tir.const(k)))

    def source(a: int, o: PrimExpr) -> tuple[PrimExpr, PrimExpr | None]:
        if a not in slot:
            return o, None
        k = slot[a]
        return _pad_runtime_source(o, width(k), width(k + len(axes)), x.shape[a], attrs.mode)

    return padded_read(x, value, out_dims(out_type, inputs), source)


# ---------------------------------------------------------------------------------------------
# tensor.slice


def _slice_start(s: PrimExpr, n: PrimExpr, step: int) -> PrimExpr:
    """ONNX Slice's clamped start (kiln.op.concat_slice.slice_bounds) of a start read at run time."""
    zero = tir.const(0)
    s = select(s < 0, s + n, s)
    hi = n if step > 0 else n - 1
    return tir.max_(tir.min_(s, hi), zero)


def slice_runtime(attrs, inputs, out_type, consts):
    """out[o] = x[start + o * step] per sliced axis, the starts read from their tensor; the ends only
    decide the output extents (the call's symbolic dims)."""
    x, starts = inputs[0], inputs[1]
    name = "tensor.slice"
    if starts.ndim != 1 or not isinstance(starts.shape[0], tir.IntImm):
        raise ComputeError(f"{name}: starts must be 1-D of static length, got shape {starts.shape}")
    count = starts.shape[0].value
    axes = const_ints(name, consts, 3, "axes", required=inputs[3] is not None) or range(count)
    steps = const_ints(name, consts, 4, "steps", required=inputs[4] is not None) or (1,) * count
    if len(axes) != count or len(steps) != count or 0 in steps:
        raise ComputeError(f"{name}: axes {tuple(axes)} and steps {tuple(steps)} do not fit {count} starts")
    slot = {a % x.ndim: k for k, a in enumerate(axes)}

    def f(*i):
        src = []
        for a, o in enumerate(i):
            if a not in slot:
                src.append(o)
                continue
            k, n = slot[a], x.shape[a]
            begin = _slice_start(tir.cast("int64", starts(tir.const(k))), n, steps[k])
            src.append(tir.max_(tir.min_(begin + o * steps[k], n - 1), tir.const(0)))
        return x(*src)

    return te.compute(out_dims(out_type, inputs), f, name="slice")
