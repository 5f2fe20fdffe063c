"""Generic traversal of tir: rebuild a node from rewritten children, post-order maps, visitors,
and Var substitution. Every pass is written on top of these.

Binding positions (Let.var, LetStmt.var, For.loop_var) and Buffers are not children: a map over
expressions never renames a binder, and buffers are replaced only by passes that mean to.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import fields

from kiln.tir.expr import Let, PrimExpr, Var
from kiln.tir.stmt import For, LetStmt, PrimFunc, Stmt

_BINDERS = {(Let, "var"), (LetStmt, "var"), (For, "loop_var")}
_FIELDS: dict[type, tuple[str, ...]] = {}
_INIT: dict[type, tuple[str, ...]] = {}

Node = PrimExpr | Stmt
ExprFn = Callable[[PrimExpr], PrimExpr]
StmtFn = Callable[[Stmt], Stmt]


def _child_fields(cls: type) -> tuple[str, ...]:
    """Names of the fields that may hold child nodes (cached per class)."""
    if cls not in _FIELDS:
        _FIELDS[cls] = tuple(f.name for f in fields(cls) if (cls, f.name) not in _BINDERS and f.name != "dtype")
    return _FIELDS[cls]


def _is_child(v: object) -> bool:
    return isinstance(v, (PrimExpr, Stmt))


def children(node: Node) -> Iterator[Node]:
    """The direct child expressions and statements of `node`, in field order."""
    return iter(_child_list(node))


def _child_list(node: Node) -> list[Node]:
    """children(node) as a list: walks run through here once per node, where a generator's overhead
    was most of their time."""
    if isinstance(node, Var):
        return []
    out = []
    for name in _child_fields(type(node)):
        v = getattr(node, name)
        if isinstance(v, (PrimExpr, Stmt)):
            out.append(v)
        elif isinstance(v, tuple):
            out.extend([x for x in v if isinstance(x, (PrimExpr, Stmt))])
    return out


def _init_fields(cls: type) -> tuple[str, ...]:
    """Names of the constructor's fields in order (cached per class): rebuild passes them positionally."""
    if cls not in _INIT:
        _INIT[cls] = tuple(f.name for f in fields(cls) if f.init)
    return _INIT[cls]


def _map_tuple(v: tuple, fexpr: ExprFn, fstmt: StmtFn) -> tuple:
    """A tuple field with its child nodes mapped (nested tuples too); the same tuple when none changed."""
    new = tuple(fexpr(x) if isinstance(x, PrimExpr) else fstmt(x) if isinstance(x, Stmt)
                else _map_tuple(x, fexpr, fstmt) if isinstance(x, tuple) and any(_is_child(y) for y in x) else x
                for x in v)
    return v if all(a is b for a, b in zip(new, v)) else new


def rebuild(node: Node, fexpr: ExprFn, fstmt: StmtFn) -> Node:
    """`node` with each child expression mapped by `fexpr` and each child statement by `fstmt`;
    the same object when nothing changed (keeps sharing, makes no-op passes cheap). Every pass runs
    through here once per node, so it reads the class's field layout from a cache and builds the
    node positionally (dataclasses.fields per call was a fifth of lowering's time)."""
    if isinstance(node, Var):
        return node
    changed = None
    for name in _child_fields(type(node)):
        old = getattr(node, name)
        if isinstance(old, PrimExpr):
            new = fexpr(old)
        elif isinstance(old, Stmt):
            new = fstmt(old)
        elif isinstance(old, tuple) and any(_is_child(x) for x in old):
            new = _map_tuple(old, fexpr, fstmt)
        else:
            continue
        if new is not old:
            if changed is None:
                changed = {}
            changed[name] = new
    if changed is None:
        return node
    return type(node)(*[changed[n] if n in changed else getattr(node, n) for n in _init_fields(type(node))])


Memo = dict[int, tuple[PrimExpr, PrimExpr]]  # id(node) -> (node, its rewrite); holding node keeps its id unique


def map_expr(e: PrimExpr, f: Callable[[PrimExpr], PrimExpr | None],
             pre: Callable[[PrimExpr, ExprFn], PrimExpr | None] | None = None, memo: Memo | None = None) -> PrimExpr:
    """Post-order rewrite: children first, then `f(node)` (None keeps the rebuilt node).
    Shared subexpressions are rewritten once. `pre(node, go)`, when given, sees each node first and
    may answer for it (mapping only the children it needs through `go`); None goes on as usual.
    `memo`, when given, is shared with other calls of the same rewrite: a node met again (the
    subtrees an unrolled loop's copies share) answers from it; only for a rewrite that depends on
    nothing but the node."""
    memo = {} if memo is None else memo

    def go(x: PrimExpr) -> PrimExpr:
        hit = memo.get(id(x))
        if hit is not None:
            return hit[1]
        r = pre(x, go) if pre is not None else None
        if r is None:
            y = rebuild(x, go, _no_stmt)
            r = f(y)
            r = y if r is None else r
        memo[id(x)] = (x, r)
        return r

    return go(e)


def _no_stmt(s: Stmt) -> Stmt:
    raise TypeError(f"a statement inside an expression: {type(s).__name__}")


def map_stmt(s: Stmt, fexpr: ExprFn | None = None, fstmt: Callable[[Stmt], Stmt | None] | None = None) -> Stmt:
    """Post-order rewrite of a statement tree: every expression it holds is mapped by `fexpr`
    (whole expressions, not their parts), then each rebuilt statement by `fstmt` (None keeps it)."""
    fe = fexpr or (lambda e: e)

    def go(x: Stmt) -> Stmt:
        y = rebuild(x, fe, go)
        r = fstmt(y) if fstmt else None
        return y if r is None else r

    return go(s)


def walk(node: Node) -> Iterator[Node]:
    """Every node reachable from `node` (pre-order, expressions inside statements included)."""
    stack = [node]
    seen: set[int] = set()
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        yield x
        stack.extend(reversed(_child_list(x)))


def free_vars(node: Node) -> set[Var]:
    """Vars used in `node` (loop/let binders included when used; buffers' shapes not)."""
    return {x for x in walk(node) if isinstance(x, Var)}


def uses_var(node: Node, v: Var) -> bool:
    return any(x is v for x in walk(node))


def substitute(node, vmap: dict[Var, PrimExpr]):
    """`node` (an expression, statement or PrimFunc body) with each Var in `vmap` replaced."""
    if not vmap:
        return node
    if isinstance(node, PrimFunc):
        return PrimFunc(node.name, node.params, substitute(node.body, vmap), node.attrs)

    def fe(e: PrimExpr) -> PrimExpr:
        return map_expr(e, lambda x: vmap.get(x) if isinstance(x, Var) else None)

    if isinstance(node, PrimExpr):
        return fe(node)
    return map_stmt(node, fe)


def _nodes_using(node: Node, v: Var) -> set[int]:
    """ids of the nodes under `node` (itself included) whose subtree holds `v` (one post-order walk)."""
    memo: dict[int, bool] = {}
    keep: list[Node] = []  # the nodes memo's ids name stay alive while it is read

    def uses(x: Node) -> bool:
        hit = memo.get(id(x))
        if hit is None:
            hit = x is v or any([uses(c) for c in _child_list(x)])
            memo[id(x)] = hit
            keep.append(x)
        return hit

    uses(node)
    return {k for k, used in memo.items() if used}


def instances(node: Stmt, v: Var, values: Iterable[PrimExpr]) -> list[Stmt]:
    """`substitute(node, {v: value})` for each of `values`: the subtrees that do not use `v` are found
    once and shared by every copy, so unrolling a loop of n iterations walks only the part of its body
    that reads the index n times (substitute walked the whole body per iteration)."""
    using = _nodes_using(node, v)
    out = []
    for value in values:
        memo: dict[int, Node] = {}

        def go(x: Node, value: PrimExpr = value, memo: dict[int, Node] = memo) -> Node:
            if id(x) not in using:
                return x
            if x is v:
                return value
            hit = memo.get(id(x))
            if hit is None:
                hit = memo[id(x)] = rebuild(x, go, go)
            return hit

        out.append(go(node))
    return out
