"""Broadcasting computes: arithmetic, comparisons, logic, bitwise ops and shifts, pow, mod, the
variadic min/max/sum/mean, clip, where, prelu and swiglu.

Integer division truncates toward zero (TruncDiv, C semantics); Mod is floor-mod unless fmod=1.
Dims only known at run time (which of them broadcast is decided by the data) are read as
(dim == 1 ? 0 : i), the output dim computed from the inputs' at run time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kiln import te, tir
from kiln.ir.types import ANY
from kiln.tir import PrimExpr, select
from kiln.topi.elemwise import sigmoid, wide_dtype
from kiln.topi.registry import handles_runtime_dims, is_one, out_dims, register_compute, tensor_type


def broadcast_compute(xs: Sequence[te.Tensor], out_type, f: Callable[..., PrimExpr], name: str) -> te.Tensor:
    """f applied to every input read at the output index (numpy broadcasting)."""
    shape = broadcast_shape(out_type, xs)
    return te.compute(shape, lambda *i: f(*(runtime_load(x, i, shape) for x in xs)), name=name)


def broadcast_shape(out_type, xs: Sequence[te.Tensor]) -> tuple[PrimExpr, ...]:
    """The output dims; one the type leaves unknown (ANY) is computed from the inputs' dims at run time."""
    dims = list(out_dims(out_type, xs))
    for k, d in enumerate(tensor_type(out_type).shape):
        if d == ANY:
            dims[k] = runtime_dim([x.shape[x.ndim - len(dims) + k] for x in xs if x.ndim - len(dims) + k >= 0])
    return tuple(dims)


def runtime_dim(ds: Sequence[PrimExpr]) -> PrimExpr:
    """numpy's broadcast of dims that agree or are 1: max(a, b), but 0 when either is 0 (a size
    expression in Min/Max/Mul, which the executor evaluates to allocate the output)."""
    ds = [d for d in ds if not is_one(d)]
    fixed = [d for d in ds if isinstance(d, tir.IntImm)]
    if fixed or not ds:
        return fixed[0] if fixed else tir.const(1)
    acc = ds[0]
    for d in ds[1:]:
        if d is not acc:
            acc = tir.max_(acc, d) * tir.min_(tir.min_(acc, d), tir.const(1))
    return acc


def runtime_load(x: te.Tensor, idx: Sequence[PrimExpr], shape: Sequence[PrimExpr]) -> PrimExpr:
    """x read at output index idx under numpy broadcasting, where a dim not known to be the output's
    (one only known at run time) broadcasts when it is 1: index (dim == 1 ? 0 : i)."""
    off = len(idx) - x.ndim
    out = []
    for k, d in enumerate(x.shape):
        i = idx[off + k]
        if is_one(d):
            out.append(tir.const(0))
        elif isinstance(d, tir.IntImm) or d is shape[off + k]:
            out.append(i)
        else:
            out.append(select(tir.eq(d, tir.const(1)), tir.const(0), i))
    return x(*out)


def _wide(f: Callable[..., PrimExpr]) -> Callable[..., PrimExpr]:
    """f on floats widened to the compute dtype, the result cast back to the first input's dtype."""
    def g(*vs):
        w = wide_dtype(vs[0].dtype)
        return tir.cast(vs[0].dtype, f(*(tir.cast(w, v) for v in vs)))

    return g


def _register(name: str, f: Callable[..., PrimExpr], widen: bool = True) -> None:
    def compute(attrs, inputs, out_type, consts):
        xs = [x for x in inputs if x is not None]
        return broadcast_compute(xs, out_type, _wide(f) if widen else f, name.split(".")[1])

    register_compute(name)(compute)
    handles_runtime_dims(name)


def _div(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    return a / b if tir.is_float(a.dtype) else tir.TruncDiv(a, b)


_register("math.add", lambda a, b: a + b)
_register("math.sub", lambda a, b: a - b)
_register("math.mul", lambda a, b: a * b)
_register("math.div", _div)
_register("math.equal", lambda a, b: tir.eq(a, b), widen=False)
_register("math.greater", lambda a, b: a > b, widen=False)
_register("math.greater_or_equal", lambda a, b: a >= b, widen=False)
_register("math.less", lambda a, b: a < b, widen=False)
_register("math.less_or_equal", lambda a, b: a <= b, widen=False)
_register("math.and", lambda a, b: a & b, widen=False)
_register("math.or", lambda a, b: a | b, widen=False)
_register("math.xor", lambda a, b: tir.ne(a, b), widen=False)
for _op in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    _register(f"math.{_op}", lambda a, b, _op=_op: tir.call(_op, a, b), widen=False)


def _fold(f: Callable[[PrimExpr, PrimExpr], PrimExpr]) -> Callable[..., PrimExpr]:
    def g(*vs):
        acc = vs[0]
        for v in vs[1:]:
            acc = f(acc, v)
        return acc

    return g


_register("math.max", _fold(tir.max_))
_register("math.min", _fold(tir.min_))
_register("math.sum", _fold(lambda a, b: a + b))
_register("math.mean", lambda *vs: _fold(lambda a, b: a + b)(*vs) / tir.const(float(len(vs)), vs[0].dtype))
_register("nn.prelu", lambda x, s: select(x < tir.const(0, x.dtype), s * x, x))
_register("math.where", lambda c, x, y: select(c, x, y), widen=False)


@register_compute("math.mod")
def _mod(attrs, inputs, out_type, consts):
    def f(a, b):
        if attrs.fmod:
            return tir.call("fmod", a, b) if tir.is_float(a.dtype) else tir.TruncMod(a, b)
        return tir.FloorMod(a, b)

    return broadcast_compute(inputs[:2], out_type, _wide(f), "mod")


@register_compute("math.pow")
def _pow(attrs, inputs, out_type, consts):
    x, y = inputs[0], inputs[1]

    def f(a, b):
        if not tir.is_float(a.dtype) and not tir.is_float(b.dtype):
            # a negative exponent gives the truncated reciprocal: 0 unless |a| == 1
            zero, one = tir.const(0, a.dtype), tir.const(1, a.dtype)
            p = tir.call("pow", a, tir.cast(a.dtype, tir.max_(b, tir.const(0, b.dtype))))
            odd = tir.ne(tir.FloorMod(b, tir.const(2, b.dtype)), tir.const(0, b.dtype))
            neg = select(tir.eq(a, one), one,
                         select(tir.eq(a, -one) if a.dtype[0] == "i" else tir.const(False),
                                select(odd, -one, one), zero))
            return select(b < tir.const(0, b.dtype), neg, p)
        calc = "float64" if "float64" in (a.dtype, b.dtype) or not tir.is_float(a.dtype) else "float32"
        return tir.cast(a.dtype, te.power(tir.cast(calc, a), tir.cast(calc, b)))

    return broadcast_compute([x, y], out_type, f, "pow")


@register_compute("math.bit_shift")
def _bit_shift(attrs, inputs, out_type, consts):
    def f(x, n):
        bits = int(x.dtype.lstrip("uint")) if x.dtype[0] == "u" else int(x.dtype[3:])
        outside = (n < tir.const(0, n.dtype)) | (n >= tir.const(bits, n.dtype))
        k = tir.min_(tir.max_(n, tir.const(0, n.dtype)), tir.const(bits - 1, n.dtype))
        if attrs.direction == "RIGHT":
            fill = select(x < tir.const(0, x.dtype), tir.const(-1, x.dtype), tir.const(0, x.dtype)) \
                if x.dtype[0] == "i" else tir.const(0, x.dtype)
            return select(outside, fill, tir.call("shift_right", x, k))
        u = f"uint{bits}"  # shift the unsigned bits: what passes the sign bit drops off
        shifted = tir.cast(x.dtype, tir.call("shift_left", tir.cast(u, x), tir.cast(u, k)))
        return select(outside, tir.const(0, x.dtype), shifted)

    return broadcast_compute(inputs[:2], out_type, f, "bit_shift")


@register_compute("math.clip")
def _clip(attrs, inputs, out_type, consts):
    x, lo, hi = inputs[:3]

    def f(*i):
        v = x(*i)
        w = wide_dtype(v.dtype)
        v = tir.cast(w, v)
        if lo is not None:
            v = tir.max_(v, tir.cast(w, lo(*([0] * lo.ndim))))
        if hi is not None:
            v = tir.min_(v, tir.cast(w, hi(*([0] * hi.ndim))))
        return tir.cast(x.dtype, v)

    return te.compute(x.shape, f, name="clip")


@register_compute("nn.swiglu")
def _swiglu(attrs, inputs, out_type, consts):
    def f(a, b):
        gate = tir.cast(a.dtype, sigmoid(tir.const(attrs.alpha, a.dtype) * a))
        return a * gate * b

    return broadcast_compute(inputs[:2], out_type, f, "swiglu")


handles_runtime_dims("math.mod", "math.pow", "math.bit_shift", "nn.swiglu")
# gather_elements reads x at the index tensor's own coordinates (no dim broadcasts), so run-time dims are safe
handles_runtime_dims("tensor.gather_elements")
