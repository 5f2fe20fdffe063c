"""The layout propagation engine behind ConvertLayout and AlterOpLayout.

Walking the graph bottom-up, a value is either plain (in the layout the original graph has it
in) or `InLayout` (held in another layout `cur`). A pass-specific conv rule seeds a region in a
target layout; RELAYOUT_RULES carry that layout through layout-agnostic ops (elementwise,
broadcast, pooling, concat); every other consumer gets the value transformed back (once per
value). So transforms appear only at region edges; `transform` (layout_rules) folds them into
constant weights and cancels inverse pairs, and a final TRANSFORM_RULES sweep cleans what the
graph had before. Values bound by `let` are region edges.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, fields, replace

import numpy as np

from kiln.errors import TypeInferenceError
from kiln.ir.expr import Call, Constant, Expr, Function, Op, TupleGetItem, absent, children, is_absent
from kiln.ir.types import TensorType
from kiln.ir.visitor import post_order, with_children
from kiln.op.concat_slice import slice_bounds
from kiln.op.layout import (
    POOL_OPS,
    Conv2dNCHWcAttrs,
    Conv2dNHWCAttrs,
    LayoutTransformAttrs,
    Pool2dLayoutAttrs,
    nchw_pool_attrs,
    parse_layout,
    transformed_type,
)
from kiln.op.nn import ConvAttrs
from kiln.op.registry import Pattern, get_op
from kiln.op.typerel import broadcast_shapes
from kiln.transform.layout_rules import TRANSFORM_RULES, transform
from kiln.transform.pattern import apply_rules

# ops that map finite values (incl. the zeros of padded channels) to finite values: the only
# ones a padded blocked layout is carried through
FINITE_SAFE = frozenset({
    "nn.relu", "nn.leaky_relu", "nn.elu", "nn.selu", "nn.celu", "nn.sigmoid", "nn.hard_sigmoid",
    "nn.hard_swish", "nn.gelu", "nn.swish", "nn.softsign", "nn.mish", "nn.prelu", "math.tanh",
    "math.neg", "math.abs", "math.clip", "math.add", "math.sub", "math.mul", "math.max", "math.min",
    "math.sum", "math.mean"})


@dataclass(frozen=True)
class InLayout:
    """The original value moved from layout `orig` to layout `cur`: `expr` holds it in `cur`."""

    expr: Expr
    orig: str
    cur: str


@dataclass(frozen=True)
class _PendingGet:
    """A max_pool whose only uses are `.0`: the pooled value, already relaid out."""

    value: InLayout


def rank(e: Expr) -> int | None:
    return e.type.ndim if isinstance(e.type, TensorType) else None


def crop_sizes(old: Expr, orig: str, cur: str, target: str) -> tuple[int, ...]:
    """`sizes` that crop the padding `cur` added to `old` (a value in `orig`) when moving to `target`."""
    c, o, t = parse_layout(cur), parse_layout(orig), parse_layout(target)
    shape = old.type.shape  # type: ignore[union-attr]
    out = []
    for p in t.primals:
        d, f = shape[o.index(p)], c.block(p)
        out.append(d if f and isinstance(d, int) and d % f else 0)
    return tuple(out) if any(out) else ()


def padded(old: Expr, orig: str, cur: str) -> bool:
    """True when `old` (in `orig`) held in `cur` carries zero padding (or might)."""
    c, o = parse_layout(cur), parse_layout(orig)
    shape = old.type.shape  # type: ignore[union-attr]
    return any(c.block(p) > 1 and not (isinstance(shape[o.index(p)], int) and shape[o.index(p)] % c.block(p) == 0)
               for p in o.primals)


class Relayout:
    """The engine: `run(fn)` rewrites one function with `conv_rule` as the region seed."""

    def __init__(self, conv_rule: Callable[[Relayout, Call], InLayout | Expr | None]):
        self.conv_rule = conv_rule
        self.memo: dict[int, Expr | InLayout | _PendingGet] = {}
        self.plain_of: dict[int, Expr] = {}
        self.moved: dict[tuple[int, str, str], Expr] = {}
        self.users: dict[int, list[Expr]] = defaultdict(list)

    def run(self, fn: Function) -> Function:
        order = post_order(fn)
        for e in order:
            for c in children(e):
                self.users[id(c)].append(e)
        self.users[id(fn.body)].append(fn)
        for e in order:
            self.memo[id(e)] = self.visit(e)
        return apply_rules(self.plain(fn), TRANSFORM_RULES)

    def visit(self, e: Expr) -> Expr | InLayout | _PendingGet:
        if isinstance(e, Call) and isinstance(e.op, Op):
            for _, applies, rule in RELAYOUT_RULES:
                if applies(e):
                    try:
                        out = rule(self, e)
                    except TypeInferenceError:
                        out = None
                    if out is not None:
                        return out
        if isinstance(e, TupleGetItem) and e.index == 0:
            pending = self.memo[id(e.tuple_value)]
            if isinstance(pending, _PendingGet):
                return pending.value
        return self.rebuild(e)

    def rebuild(self, e: Expr) -> Expr:
        return with_children(e, tuple(self.plain(c) for c in children(e)))

    def plain(self, old: Expr) -> Expr:
        """`old`'s new value in its original layout (transformed back once, then shared)."""
        v = self.memo[id(old)]
        if isinstance(v, _PendingGet):
            v = self.memo[id(old)] = self.rebuild(old)
        if not isinstance(v, InLayout):
            return v
        if id(old) not in self.plain_of:
            self.plain_of[id(old)] = transform(v.expr, v.cur, v.orig, crop_sizes(old, v.orig, v.cur, v.orig))
        return self.plain_of[id(old)]

    def state(self, old: Expr) -> InLayout | None:
        v = self.memo[id(old)]
        return v if isinstance(v, InLayout) else None

    def get(self, old: Expr, orig: str, target: str) -> Expr | None:
        """`old` (a value in layout `orig`) held in `target`; None when that is not possible."""
        if rank(old) != parse_layout(orig).rank:
            return None
        v = self.state(old)
        if v is None:  # one transform per (value, layout), however many consumers want it
            key = (id(old), orig, target)
            if key not in self.moved:
                self.moved[key] = transform(self.plain(old), orig, target)
            return self.moved[key]
        if v.orig != orig:
            return None
        if v.cur == target:
            return v.expr
        return transform(v.expr, v.cur, target, crop_sizes(old, orig, v.cur, target))


# ---------------------------------------------------------------------------------------------
# conv calls, whatever their layout


@dataclass(frozen=True)
class Conv2d:
    """A 2-D conv call read independently of its operator: layouts, geometry, operands."""

    x: Expr
    w: Expr
    b: Expr | None
    data: str
    kernel: str
    geometry: dict

    @staticmethod
    def of(call: Call) -> Conv2d | None:
        name, a = call.op.name, call.attrs  # type: ignore[union-attr]
        b = call.args[2] if len(call.args) > 2 and not is_absent(call.args[2]) else None
        geo = {f: getattr(a, f) for f in ("auto_pad", "dilations", "pads", "strides")} if a is not None else {}
        if name == "nn.conv" and rank(call.args[0]) == 4 and rank(call.args[1]) == 4:
            return Conv2d(call.args[0], call.args[1], b, "NCHW", "OIHW", {**geo, "group": a.group})
        if name == "nn.conv2d_nhwc":
            return Conv2d(call.args[0], call.args[1], b, "NHWC", a.kernel_layout, {**geo, "group": a.group})
        return None

    def build(self, x: Expr, w: Expr, b: Expr | None, data: str, kernel: str) -> Expr:
        args = (x, w) if b is None else (x, w, b)
        if data == "NCHW" and kernel == "OIHW":
            return get_op("nn.conv")(*args, attrs=ConvAttrs(**self.geometry))
        if data == "NHWC":
            return get_op("nn.conv2d_nhwc")(*args, attrs=Conv2dNHWCAttrs(kernel_layout=kernel, **self.geometry))
        return get_op("nn.conv2d_nchwc")(*args, attrs=Conv2dNCHWcAttrs(data, kernel, **self.geometry))


def _is_conv(e: Call) -> bool:
    return e.op.name in ("nn.conv", "nn.conv2d_nhwc")  # type: ignore[union-attr]


def relayout_conv(eng: Relayout, call: Call) -> InLayout | Expr | None:
    """The pass decides what a conv becomes (ConvertLayout / AlterOpLayout rules)."""
    return eng.conv_rule(eng, call)


# ---------------------------------------------------------------------------------------------
# layout-agnostic ops


def _no_axis_attrs(call: Call) -> bool:
    return call.attrs is None or not any("axis" in f.name or "axes" in f.name for f in fields(call.attrs))


def _is_elementwise(e: Call) -> bool:
    """Elementwise/broadcast math whose operands are all data broadcast to the output."""
    op = e.op  # type: ignore[union-attr]
    if op.pattern not in (Pattern.ELEMWISE, Pattern.BROADCAST) or not op.name.startswith(("math.", "nn.")):
        return False
    shapes = [a.type.shape if isinstance(a.type, TensorType) else None for a in e.args if not is_absent(a)]
    if not isinstance(e.type, TensorType) or e.type.shape is None or any(s is None for s in shapes):
        return False
    try:
        return _no_axis_attrs(e) and broadcast_shapes(*shapes) == e.type.shape
    except TypeInferenceError:
        return False


def _lead(eng: Relayout, call: Call, args: tuple[Expr, ...]) -> InLayout | None:
    """The layout the region continues in: that of a relaid-out argument shaped like the output."""
    states = [(a, eng.state(a)) for a in args if not is_absent(a) and eng.state(a) is not None]
    if not states:
        return None
    for a, s in states:
        if a.type == call.type or (isinstance(a.type, TensorType) and a.type.shape == call.type.shape):
            return s
    return states[0][1]


def _operand(eng: Relayout, old: Expr, orig: str, cur: str, out_shape: tuple) -> Expr | None:
    """A broadcast operand of a relaid-out op, in `cur` (a size-1 blocked axis stays unblocked)."""
    t = old.type
    if not isinstance(t, TensorType) or t.shape is None:
        return None
    r = parse_layout(orig).rank
    if len(t.shape) < r:
        if all(d == 1 for d in t.shape):
            return eng.plain(old)
        if not isinstance(old, Constant):
            return None
        old = Constant(old.data.reshape((1,) * (r - len(t.shape)) + old.data.shape))
        eng.memo[id(old)] = old
        t = old.type
    o, c = parse_layout(orig), parse_layout(cur)
    target = cur
    for p in o.primals:
        d, want = t.shape[o.index(p)], out_shape[o.index(p)]
        if c.block(p) > 1 and d != want:
            if d != 1:
                return None
            target = target.replace(f"{c.block(p)}{p.lower()}", f"1{p.lower()}")
    return eng.get(old, orig, target)


def relayout_elementwise(eng: Relayout, call: Call) -> InLayout | None:
    args = call.args
    lead = _lead(eng, call, args)
    if lead is None or not isinstance(call.type, TensorType) or call.type.ndim != parse_layout(lead.orig).rank:
        return None
    if padded(call, lead.orig, lead.cur) and call.op.name not in FINITE_SAFE:  # type: ignore[union-attr]
        return None
    new_args = []
    for a in args:
        n = a if is_absent(a) else _operand(eng, a, lead.orig, lead.cur, call.type.shape)
        if n is None:
            return None
        new_args.append(n)
    return checked(Call(call.op, tuple(new_args), call.attrs, call.name), call, lead)


def checked(new: Expr, old: Expr, lead: InLayout) -> InLayout | None:
    """InLayout(new) when `new` has exactly the type of `old` moved to the lead layout."""
    want = transformed_type(old.type, LayoutTransformAttrs(lead.orig, lead.cur))
    if not isinstance(new.type, TensorType) or new.type.shape != want.shape:
        return None
    return InLayout(new, lead.orig, lead.cur)


def _pool_of(call: Call) -> tuple[Pool2dLayoutAttrs, str] | None:
    """(attrs with the data layout, that layout) of a 2-D pooling call."""
    name = call.op.name  # type: ignore[union-attr]
    if name == "nn.pool2d_layout":
        return call.attrs, call.attrs.layout
    mode = next((m for m, n in POOL_OPS.items() if n == name), None)
    if mode is None or rank(call.args[0]) != 4:
        return None
    kw = {f.name: getattr(call.attrs, f.name) for f in fields(call.attrs)} if call.attrs is not None else {}
    kw.pop("storage_order", None)
    return Pool2dLayoutAttrs(mode=mode, layout="NCHW", **kw), "NCHW"


def relayout_pool(eng: Relayout, call: Call) -> InLayout | _PendingGet | None:
    pool = _pool_of(call)
    if pool is None:
        return None
    attrs, data = pool
    v = eng.state(call.args[0])
    if v is None and call.op.name == "nn.max_pool" and data == "NCHW":  # type: ignore[union-attr]
        v = InLayout(eng.plain(call.args[0]), data, data)  # values only: the indices are never computed
    if v is None or v.orig != data:
        return None
    if v.cur == "NCHW" and attrs.mode == "max" and call.op.name == "nn.max_pool":  # type: ignore[union-attr]
        new = get_op("nn.pool2d_layout")(v.expr, attrs=replace(attrs, layout="NCHW"))
    elif v.cur == "NCHW":
        op, nchw_attrs = nchw_pool_attrs(attrs)
        new = op(v.expr, attrs=nchw_attrs)
        new = TupleGetItem(new, 0) if attrs.mode == "max" else new
    else:
        new = get_op("nn.pool2d_layout")(v.expr, attrs=replace(attrs, layout=v.cur))
    if call.op.name == "nn.max_pool":  # type: ignore[union-attr]
        uses = eng.users[id(call)]
        if not uses or not all(isinstance(u, TupleGetItem) and u.index == 0 for u in uses):
            return None
        old = call.type.fields[0]  # type: ignore[union-attr]
        out = checked(new, TupleGetItem(call, 0), v) if isinstance(old, TensorType) else None
        return _PendingGet(out) if out is not None else None
    return checked(new, call, v)


def relayout_concat(eng: Relayout, call: Call) -> InLayout | None:
    lead = _lead(eng, call, call.args)
    if lead is None or not isinstance(call.type, TensorType) or call.type.ndim != parse_layout(lead.orig).rank:
        return None
    o, c = parse_layout(lead.orig), parse_layout(lead.cur)
    letter = o.axes[call.attrs.axis % o.rank][0]
    f = c.block(letter)
    new_args = []
    for a in call.args:
        d = a.type.shape[o.index(letter)] if isinstance(a.type, TensorType) and a.type.shape else None
        if f > 1 and not (isinstance(d, int) and d % f == 0):
            return None  # padding would land inside the result
        n = eng.get(a, lead.orig, lead.cur)
        if n is None:
            return None
        new_args.append(n)
    new = get_op("tensor.concat")(*new_args, attrs=replace(call.attrs, axis=c.index(letter)))
    return checked(new, call, lead)


def relayout_resize(eng: Relayout, call: Call) -> InLayout | None:
    """A spatial resize of an NCHW tensor held blocked: the same resize over H and W of the blocked
    tensor (each channel is resampled alone), so no transform back and forth around it."""
    v = eng.state(call.args[0])
    a = call.attrs
    if v is None or v.orig != "NCHW" or a.keep_aspect_ratio_policy != "stretch":
        return None
    args = list(call.args) + [None] * (4 - len(call.args))
    if args[1] is not None and not is_absent(args[1]):
        return None  # a region of interest
    given = [(k, e) for k, e in enumerate(args[2:], 2) if e is not None and not is_absent(e)
             and not (isinstance(e, Constant) and e.data.size == 0)]  # an empty scales beside sizes
    if len(given) != 1 or not isinstance(given[0][1], Constant):
        return None
    k, const = given[0]
    x_shape = call.args[0].type.shape  # type: ignore[union-attr]
    axes = list(a.axes) if a.axes is not None else [0, 1, 2, 3]
    axes = [ax % 4 for ax in axes]
    given_of = dict(zip(axes, const.data.reshape(-1).tolist()))
    unchanged = [1.0 if k == 2 else d for d in x_shape]  # the scale or size that leaves an axis alone
    values = [given_of.get(ax, unchanged[ax]) for ax in range(4)]
    if values[:2] != unchanged[:2]:
        return None  # batch or channels resized
    cur = parse_layout(v.cur)
    hw = (cur.index("H"), cur.index("W"))
    spatial = Constant(np.asarray(values[2:], const.data.dtype))
    scales, sizes = (spatial, absent()) if k == 2 else (absent(), spatial)
    new = get_op("vision.resize")(v.expr, absent(), scales, sizes, attrs=replace(a, axes=hw))
    return checked(new, call, v)


def relayout_slice(eng: Relayout, call: Call) -> InLayout | None:
    """A window of a tensor held blocked: the same window of the blocked tensor, whole blocks on a
    blocked axis. Gated activations and GLU split a conv's channels in halves; transformed back at the
    slice, the gate ran plain, reading the blocked tensor with a stride of the block (a WaveNet-style
    model's tanh * sigmoid kernels: 36% of its time)."""
    v = eng.state(call.args[0])
    shape = call.args[0].type.shape  # type: ignore[union-attr]
    consts = call.args[1:]
    if v is None or shape is None or not all(isinstance(a, Constant) for a in consts):
        return None
    o, c = parse_layout(v.orig), parse_layout(v.cur)
    if len(shape) != o.rank:
        return None
    starts, ends, *rest = (a.data.reshape(-1).tolist() for a in consts)
    axes = rest[0] if rest else list(range(len(starts)))
    steps = rest[1] if len(rest) > 1 else [1] * len(starts)
    window: list[list[int]] = [[], [], [], []]
    for start, end, ax, step in zip(starts, ends, axes, steps):
        letter, d = o.axes[ax % o.rank][0], shape[ax % o.rank]
        f = c.block(letter)
        if not isinstance(d, int) or step < 1 or (f > 1 and step != 1):
            return None
        lo, hi = slice_bounds(start, end, step, d)
        if f > 1 and (lo % f or hi % f):
            return None  # a window inside a block, or one that ends in the padding
        for k, val in enumerate((lo // max(f, 1), hi // max(f, 1), c.index(letter), step)):
            window[k].append(val)
    new = get_op("tensor.slice")(v.expr, *(Constant(np.asarray(w, np.int64)) for w in window))
    return checked(new, call, v)


# (name, applies to call, rule): a rule returns the relaid-out value or None to leave the call
RELAYOUT_RULES: list[tuple[str, Callable[[Call], bool], Callable]] = [
    ("relayout-conv", _is_conv, relayout_conv),
    ("relayout-pool", lambda e: e.op.name in POOL_OPS.values() or e.op.name == "nn.pool2d_layout", relayout_pool),
    ("relayout-concat", lambda e: e.op.name == "tensor.concat", relayout_concat),
    ("relayout-resize", lambda e: e.op.name == "vision.resize", relayout_resize),
    ("relayout-slice", lambda e: e.op.name == "tensor.slice", relayout_slice),
    ("relayout-elementwise", _is_elementwise, relayout_elementwise),
]
