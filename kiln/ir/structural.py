"""Structural equality and hashing of expressions and modules.

Alpha-equivalence: bound Vars match by binding position, free Vars by identity. Graph-aware:
nodes are matched one-to-one, so sharing must agree (a shared call is not equal to two copies)
and each pair is compared once. Both are iterative, so 10,000-node chains are fine.
"""

from __future__ import annotations

import math
from dataclasses import fields, is_dataclass
from typing import Any

import numpy as np

from kiln.ir.attrs import attrs_equal, value_equal
from kiln.ir.expr import Call, Constant, Expr, Function, GlobalVar, If, Let, Tuple, TupleGetItem, Var
from kiln.ir.module import IRModule
from kiln.ir.visitor import post_order


def structural_equal(a: IRModule | Expr, b: IRModule | Expr) -> bool:
    if isinstance(a, IRModule) or isinstance(b, IRModule):
        if not (isinstance(a, IRModule) and isinstance(b, IRModule)):
            return False
        return (tuple(a.output_names) == tuple(b.output_names) and a.functions.keys() == b.functions.keys()
                and all(_Equal().run(a.functions[k], b.functions[k]) for k in a.functions))
    return _Equal().run(a, b)


class _Equal:
    def __init__(self):
        self.a2b: dict[int, Expr] = {}
        self.b2a: dict[int, Expr] = {}

    def bind(self, x: Expr, y: Expr) -> bool:
        """Record x <-> y; False when either side is already matched elsewhere."""
        px, py = self.a2b.get(id(x)), self.b2a.get(id(y))
        if px is not None or py is not None:
            return px is y and py is x
        self.a2b[id(x)], self.b2a[id(y)] = y, x
        return True

    def run(self, a: Expr, b: Expr) -> bool:
        stack = [(a, b)]
        while stack:
            x, y = stack.pop()
            if self.a2b.get(id(x)) is y and self.b2a.get(id(y)) is x:
                continue
            if isinstance(x, Var):
                # a bound Var was matched at its binder; an unmatched one is free
                if not (x is y and self.bind(x, y)):
                    return False
                continue
            if type(x) is not type(y) or not self.bind(x, y) or x.type != y.type:
                return False
            pairs = self.node(x, y)
            if pairs is None:
                return False
            stack.extend(reversed(pairs))
        return True

    def binders(self, xs: tuple[Var, ...], ys: tuple[Var, ...]) -> bool:
        return len(xs) == len(ys) and all(
            isinstance(p, Var) and isinstance(q, Var) and p.type == q.type and self.bind(p, q)
            for p, q in zip(xs, ys))

    def node(self, x: Expr, y: Any) -> list[tuple[Expr, Expr]] | None:
        """Pairs of children still to compare, or None when x and y differ locally."""
        if isinstance(x, Call):
            if isinstance(x.op, Expr) != isinstance(y.op, Expr) or len(x.args) != len(y.args):
                return None
            if not isinstance(x.op, Expr) and (x.op is not y.op or not attrs_equal(x.attrs, y.attrs)):
                return None
            head = [(x.op, y.op)] if isinstance(x.op, Expr) else []
            return head + list(zip(x.args, y.args))
        if isinstance(x, Constant):
            return [] if arrays_equal(x.data, y.data) else None
        if isinstance(x, GlobalVar):
            return [] if x.name == y.name else None
        if isinstance(x, Tuple):
            return list(zip(x.fields, y.fields)) if len(x.fields) == len(y.fields) else None
        if isinstance(x, TupleGetItem):
            return [(x.tuple_value, y.tuple_value)] if x.index == y.index else None
        if isinstance(x, If):
            return [(x.cond, y.cond), (x.then_branch, y.then_branch), (x.else_branch, y.else_branch)]
        if isinstance(x, Let):
            ok = self.binders((x.var,), (y.var,))
            return [(x.value, y.value), (x.body, y.body)] if ok else None
        if isinstance(x, Function):
            if len(x.attrs) != len(y.attrs) or not all(
                    k1 == k2 and value_equal(v1, v2) for (k1, v1), (k2, v2) in zip(x.attrs, y.attrs)):
                return None
            return [(x.body, y.body)] if self.binders(x.params, y.params) else None
        return None


def arrays_equal(x: np.ndarray, y: np.ndarray) -> bool:
    """Same dtype, shape and values; NaN equals NaN (ml_dtypes floats included)."""
    if x.dtype != y.dtype or x.shape != y.shape:
        return False
    if x.dtype.kind in "biuO":
        return bool(np.array_equal(x, y))
    wide = np.complex128 if x.dtype.kind == "c" else np.float64
    return bool(np.array_equal(x.astype(wide), y.astype(wide), equal_nan=True))


def structural_hash(x: IRModule | Expr) -> int:
    """A hash consistent with structural_equal (Vars hash by first-use order and type)."""
    if isinstance(x, IRModule):
        return hash((tuple(x.output_names),
                     tuple(sorted((k, structural_hash(f)) for k, f in x.functions.items()))))
    memo: dict[int, int] = {}
    nvars = 0
    for e in post_order(x):
        h = memo.get
        if isinstance(e, Var):
            memo[id(e)] = hash(("var", nvars, e.type))
            nvars += 1
            continue
        if isinstance(e, Call):
            head = h(id(e.op)) if isinstance(e.op, Expr) else (e.op.name, value_hash(e.attrs))
            local: Any = ("call", head, tuple(h(id(a)) for a in e.args))
        elif isinstance(e, Constant):
            local = ("const", value_hash(e.data))
        elif isinstance(e, GlobalVar):
            local = ("global", e.name)
        elif isinstance(e, Tuple):
            local = ("tuple", tuple(h(id(f)) for f in e.fields))
        elif isinstance(e, TupleGetItem):
            local = ("getitem", e.index, h(id(e.tuple_value)))
        elif isinstance(e, If):
            local = ("if", h(id(e.cond)), h(id(e.then_branch)), h(id(e.else_branch)))
        elif isinstance(e, Let):
            local = ("let", h(id(e.var)), h(id(e.value)), h(id(e.body)))
        elif isinstance(e, Function):
            local = ("fn", tuple(h(id(p)) for p in e.params), h(id(e.body)), value_hash(e.attrs))
        else:
            local = (type(e).__name__,)
        memo[id(e)] = hash(local)
    return memo[id(x)]


def value_hash(v: Any) -> int:
    """Hash of an attribute value or array, equal for values that `value_equal` calls equal."""
    if isinstance(v, np.ndarray):
        flat = v.ravel()[:1024]
        if flat.dtype.kind == "O":
            body: Any = tuple(str(s) for s in flat)
        elif flat.dtype.kind not in "biu":
            f = flat.astype(np.complex128 if flat.dtype.kind == "c" else np.float64)
            body = np.where(np.isnan(f), 0, f + 0.0).tobytes()  # NaN == NaN and -0.0 == 0.0
        else:
            body = flat.tobytes()
        return hash(("array", str(v.dtype), v.shape, body))
    if isinstance(v, float):
        return hash(("float", 0.0 if math.isnan(v) else v))
    if isinstance(v, (tuple, list)):
        return hash(("seq", tuple(value_hash(x) for x in v)))
    if is_dataclass(v) and not isinstance(v, type):
        return hash((type(v).__name__, tuple(value_hash(getattr(v, f.name)) for f in fields(v))))
    try:
        return hash((type(v).__name__, v))
    except TypeError:
        return hash(type(v).__name__)
