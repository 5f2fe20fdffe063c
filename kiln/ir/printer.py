"""IR -> text, printing every node once.

A shared node is bound (`%3 = ...;`) in the innermost block (function body, If branch, braced
`let` block) that encloses all its uses, so `parse` rebuilds the same graph, sharing included.
Work is iterative over expression depth; only nested Functions/Ifs recurse.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import MISSING, fields, is_dataclass
from typing import Any

import numpy as np

from kiln.ir import dtype as _dt
from kiln.ir.attrs import value_equal
from kiln.ir.expr import Call, Constant, Expr, Function, GlobalVar, If, Let, Tuple, TupleGetItem, Var, is_absent
from kiln.ir.module import IRModule
from kiln.ir.types import Type, type_str
from kiln.ir.visitor import post_order

SMALL = 16  # constants with at most this many elements print inline
INLINE_DTYPES = frozenset(("bool",) + _dt.NUMERIC + _dt.SMALL_FLOATS + _dt.SMALL_INTS)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
INDENT = "  "


def text(x: IRModule | Expr, params: list | None = None) -> str:
    """Text form of a module or expression. Large constants print as `meta[i]`; when `params`
    is a list, their arrays are appended to it (see `text_with_params`)."""
    p = _Printer(params if params is not None else [])
    return p.module(x) if isinstance(x, IRModule) else "\n".join(p.item(x))


def text_with_params(x: IRModule | Expr) -> tuple[str, list[np.ndarray]]:
    """(text, params) such that `parse(text, params)` rebuilds `x`."""
    params: list[np.ndarray] = []
    return text(x, params), params


def quote_name(name: str) -> str:
    return name if _IDENT.match(name) else json.dumps(name, ensure_ascii=False)


def is_small(arr: np.ndarray) -> bool:
    return arr.size <= SMALL and _dt.from_numpy(arr.dtype) in INLINE_DTYPES


def literal(arr: np.ndarray, scalar: bool) -> str:
    """`1.5:float32` (a 0-d value when `scalar`) or `[1, 2, 3, 4]:int64(2, 2)`."""
    name = _dt.from_numpy(arr.dtype)
    if _dt.is_float(name):
        vals = ", ".join(_float_text(v) for v in arr.ravel())
    else:
        vals = ", ".join(_number(bool(v) if name == "bool" else int(v)) for v in arr.ravel())
    if scalar:
        return f"{vals}:{name}"
    dims = ", ".join(str(d) for d in arr.shape) + ("," if arr.ndim == 1 else "")
    return f"[{vals}]:{name}({dims})"


def _float_text(v: np.generic) -> str:
    """Shortest text that reads back (via float64) as exactly `v`: `1e-05`, not `9.99999974e-06`."""
    short = str(v)
    if short.lstrip("-").isdigit():
        short += ".0"
    try:
        back = np.asarray(float(short)).astype(v.dtype)
        if back == v or (np.isnan(float(v)) and np.isnan(float(back))):
            return short
    except ValueError:
        pass
    return repr(float(v))


def _number(v: bool | float) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(int(v)) if isinstance(v, int) else repr(float(v))


class _Block:
    """A printed scope; `root` starts its chain of flattened `let`s."""

    __slots__ = ("depth", "parent", "root")

    def __init__(self, parent: _Block | None, root: Expr):
        self.parent, self.root = parent, root
        self.depth = 0 if parent is None else parent.depth + 1


def _lca(a: _Block, b: _Block) -> _Block:
    while a.depth > b.depth:
        a = a.parent
    while b.depth > a.depth:
        b = b.parent
    while a is not b:
        a, b = a.parent, b.parent
    return a


def uses(e: Expr) -> tuple[Expr, ...]:
    """Sub-expressions `e` uses (binders excluded)."""
    if isinstance(e, Call):
        return ((e.op,) if isinstance(e.op, Expr) else ()) + e.args
    if isinstance(e, Tuple):
        return e.fields
    if isinstance(e, TupleGetItem):
        return (e.tuple_value,)
    if isinstance(e, Let):
        return (e.value, e.body)
    if isinstance(e, If):
        return (e.cond, e.then_branch, e.else_branch)
    if isinstance(e, Function):
        return (e.body,)
    return ()


class _Printer:
    def __init__(self, params: list):
        self.params = params
        self.meta: dict[int, int] = {}

    # -- values -------------------------------------------------------------------------------

    def meta_ref(self, arr: np.ndarray) -> str:
        if id(arr) not in self.meta:
            self.meta[id(arr)] = len(self.params)
            self.params.append(arr)
        return f"meta[{self.meta[id(arr)]}]"

    def value(self, v: Any) -> str:
        """An attribute value: int, float, str, None, tuple, numpy array/scalar or Type."""
        if v is None or isinstance(v, (bool, int, float)):
            return "None" if v is None else _number(v)
        if isinstance(v, str):
            return json.dumps(v, ensure_ascii=False)
        if isinstance(v, (tuple, list)):
            return "(" + ", ".join(self.value(x) for x in v) + ("," if len(v) == 1 else "") + ")"
        if isinstance(v, np.generic) and _dt.from_numpy(v.dtype) in INLINE_DTYPES:
            return literal(np.asarray(v), scalar=True)
        if isinstance(v, np.ndarray):
            return literal(v, scalar=False) if is_small(v) else self.meta_ref(v)
        if isinstance(v, Type):
            return f"Type({type_str(v)})"
        return f"<opaque {type(v).__name__}>"

    def attrs(self, attrs: Any) -> list[str]:
        """`name=value` for every field of an attrs dataclass that differs from its default."""
        if attrs is None or not is_dataclass(attrs):
            return []
        out = []
        for f in fields(attrs):
            v = getattr(attrs, f.name)
            default = f.default if f.default is not MISSING else (
                f.default_factory() if f.default_factory is not MISSING else MISSING)
            if f.init and (default is MISSING or not value_equal(v, default)):
                out.append(f"{f.name}={self.value(v)}")
        return out

    # -- top level ----------------------------------------------------------------------------

    def module(self, mod: IRModule) -> str:
        parts = []
        if mod.output_names:
            parts.append(f"#[output_names={self.value(tuple(mod.output_names))}]")
        for name, fn in mod.functions.items():
            parts.append("\n".join(_Def(self, fn).function(f"def @{quote_name(name)}", "")))
        return "\n\n".join(parts) + "\n"

    def item(self, e: Expr) -> list[str]:
        if isinstance(e, Function):
            return _Def(self, e).function("fn ", "")
        d = _Def(self, e)
        return d.block_lines(d.top, "")


class _Def:
    """Printing state of one top-level function or expression."""

    def __init__(self, p: _Printer, root: Expr):
        self.p, self.root = p, root
        order = post_order(root)
        self.uses = Counter(id(c) for n in order for c in uses(n))
        self.names: dict[int, str] = {}
        self._name_vars([n for n in order if isinstance(n, Var)], root)
        self.counter = 0
        self.inline: set[int] = set()
        self.chained: dict[int, _Block] = {}  # flattened `let` -> its block
        self.inner: dict[int, tuple[_Block, ...]] = {}  # If/Function -> blocks of its parts
        self.block: dict[int, _Block] = {}
        self.seen: dict[int, set[int]] = {}
        self.top = self._new_block(None, root.body if isinstance(root, Function) else root)
        self.block[id(self.top.root)] = self.top
        for n in reversed(order):
            if id(n) in self.block and not isinstance(n, Var):
                self._place_uses(n)

    def _name_vars(self, vs: list[Var], root: Expr) -> None:
        """Unique names per definition (params first), so shadowing never changes meaning."""
        if isinstance(root, Function):
            vs = list(root.params) + vs
        all_names = {v.name for v in vs}
        taken: set[str] = set()
        for v in vs:
            if id(v) in self.names:
                continue
            name, i = v.name, 0
            while name in taken or (i and name in all_names):
                i += 1
                name = f"{v.name}_{i}"
            taken.add(name)
            self.names[id(v)] = "%" + quote_name(name)

    def _new_block(self, parent: _Block | None, root: Expr, braced: bool = False) -> _Block:
        blk = _Block(parent, root)
        r = root
        while isinstance(r, Let) and (braced or self.uses[id(r)] <= 1):
            self.chained[id(r)] = blk
            if self.uses[id(r.value)] == 1:
                self.inline.add(id(r.value))
            r, braced = r.body, False
        if self.uses[id(r)] <= 1:
            self.inline.add(id(r))
        return blk

    def _place_uses(self, n: Expr) -> None:
        """Give each sub-expression of `n` the innermost block enclosing all uses seen so far."""
        b = self.block[id(n)]
        if isinstance(n, If):
            tb, eb = self._new_block(b, n.then_branch), self._new_block(b, n.else_branch)
            self.inner[id(n)] = (tb, eb)
            slots = [(n.cond, b), (n.then_branch, tb), (n.else_branch, eb)]
        elif isinstance(n, Function):
            fb = self._new_block(b, n.body)
            self.inner[id(n)] = (fb,)
            slots = [(n.body, fb)]
        elif isinstance(n, Let):
            if id(n) not in self.chained:
                self._new_block(b, n, braced=True)
            lb = self.chained[id(n)]
            slots = [(n.value, lb), (n.body, lb)]
        else:
            slots = [(c, b) for c in uses(n)]
        for c, cb in slots:
            if not isinstance(c, Var):
                prev = self.block.get(id(c))
                self.block[id(c)] = cb if prev is None else _lca(prev, cb)

    # -- emission -----------------------------------------------------------------------------

    def function(self, head: str, ind: str) -> list[str]:
        return self._fn_lines(self.root, head, ind, (self.top,))

    def _fn_lines(self, fn: Function, head: str, ind: str, blocks: tuple[_Block, ...]) -> list[str]:
        items = [f"{self.names[id(v)]}: {type_str(v.type)}" for v in fn.params]
        items += [f"{quote_name(k)}={self.p.value(v)}" for k, v in fn.attrs]
        lines = [f"{head}({', '.join(items)}) -> {type_str(fn.body.type)} {{"]
        lines += self.block_lines(blocks[0], ind + INDENT)
        lines.append(ind + "}")
        return lines

    def block_lines(self, blk: _Block, ind: str) -> list[str]:
        out: list[str] = []
        r = blk.root
        while isinstance(r, Let) and self.chained.get(id(r)) is blk:
            self._emit_deps(blk, r.value, out, ind)
            out.append(f"{ind}let {self.names[id(r.var)]}: {type_str(r.var.type)} = "
                       f"{self.ref(r.value, ind)};")
            r = r.body
        self._emit_deps(blk, r, out, ind)
        out.append(ind + self.ref(r, ind))
        return out

    def _emit_deps(self, blk: _Block, start: Expr, out: list[str], ind: str) -> None:
        """Bind, in dependency order, the not yet printed nodes of `blk` that `start` needs."""
        seen = self.seen.setdefault(id(blk), set())
        stack: list[tuple[Expr, bool]] = [(start, False)]
        while stack:
            n, done = stack.pop()
            if done:
                if self.block.get(id(n)) is blk and self._bound(n) and id(n) not in self.names:
                    name = self.names[id(n)] = f"%{self.counter}"
                    self.counter += 1
                    out.append(f"{ind}{name} = {self.rhs(n, ind)};")
                continue
            nb = self.block.get(id(n))
            if isinstance(n, Var) or id(n) in seen or (nb is not None and nb.depth < blk.depth):
                continue
            seen.add(id(n))
            stack.append((n, True))
            stack.extend((c, False) for c in reversed(uses(n)))

    def _bound(self, n: Expr) -> bool:
        """Whether `n` gets a `%N = ...;` line (else it is spelled out where it is used)."""
        flat_let = id(n) in self.chained and self.chained[id(n)] is self.block.get(id(n))
        if isinstance(n, (Var, GlobalVar)) or id(n) in self.inline or flat_let:
            return False
        if isinstance(n, Constant):
            return is_small(n.data) and self.uses[id(n)] > 1
        return not is_absent(n) or self.uses[id(n)] > 1

    def ref(self, e: Expr, ind: str) -> str:
        if id(e) in self.names:
            return self.names[id(e)]
        if isinstance(e, GlobalVar):
            return "@" + quote_name(e.name)
        if isinstance(e, Constant) and not is_small(e.data):
            return self.p.meta_ref(e.data)
        if isinstance(e, Var):  # free in the printed item
            return "%" + quote_name(e.name)
        return self.rhs(e, ind)

    def rhs(self, e: Expr, ind: str) -> str:
        if isinstance(e, Call):
            head = e.op.name if not isinstance(e.op, Expr) else self.ref(e.op, ind)
            items = [self.ref(a, ind) for a in e.args] + self.p.attrs(e.attrs)
            return f"{head}({', '.join(items)})"
        if isinstance(e, Tuple):
            return "(" + ", ".join(self.ref(f, ind) for f in e.fields) + ("," if len(e.fields) == 1 else "") + ")"
        if isinstance(e, TupleGetItem):
            return f"{self.ref(e.tuple_value, ind)}.{e.index}"
        if isinstance(e, Constant):
            return literal(e.data, scalar=e.data.ndim == 0)
        if isinstance(e, If):
            tb, eb = self.inner[id(e)]
            return "\n".join([f"if ({self.ref(e.cond, ind)}) {{", *self.block_lines(tb, ind + INDENT),
                              ind + "} else {", *self.block_lines(eb, ind + INDENT), ind + "}"])
        if isinstance(e, Function):
            return "\n".join(self._fn_lines(e, "fn ", ind, self.inner[id(e)]))
        if isinstance(e, Let):
            return "\n".join(["{", *self.block_lines(self.chained[id(e)], ind + INDENT), ind + "}"])
        raise TypeError(f"cannot print {type(e).__name__}")
