"""Memoized, iterative traversal and rewriting: safe on graphs far deeper than Python's
recursion limit (a 10,000-node chain), and each shared sub-expression is visited once."""

from __future__ import annotations

from collections.abc import Callable

from kiln.ir.expr import Call, Expr, Function, If, Let, Tuple, TupleGetItem, children


def post_order(root: Expr, kids: Callable[[Expr], tuple[Expr, ...]] = children,
               skip: set[int] | frozenset[int] = frozenset()) -> list[Expr]:
    """Every sub-expression of `root` once, children before parents. `kids` chooses which children
    to follow (e.g. not into function bodies); nodes whose id is in `skip` are left out."""
    order: list[Expr] = []
    seen: set[int] = set(skip)
    stack: list[tuple[Expr, bool]] = [(root, False)]
    while stack:
        e, expanded = stack.pop()
        if expanded:
            order.append(e)
            continue
        if id(e) in seen:
            continue
        seen.add(id(e))
        stack.append((e, True))
        for c in reversed(kids(e)):
            if id(c) not in seen:
                stack.append((c, False))
    return order


def scope_children(e: Expr) -> tuple[Expr, ...]:
    """Children evaluated in the same scope as `e`: not Function bodies, not If branches."""
    if isinstance(e, Function):
        return ()
    if isinstance(e, If):
        return (e.cond,)
    return children(e)


def with_children(e: Expr, new: tuple[Expr, ...]) -> Expr:
    """`e` rebuilt over new children (same order as `children(e)`); `e` itself if unchanged."""
    old = children(e)
    if len(old) == len(new) and all(a is b for a, b in zip(old, new)):
        return e
    if isinstance(e, Call):
        if isinstance(e.op, Expr):
            return Call(new[0], new[1:], e.attrs, e.name)
        return Call(e.op, new, e.attrs, e.name)
    if isinstance(e, Tuple):
        return Tuple(new)
    if isinstance(e, TupleGetItem):
        return TupleGetItem(new[0], e.index)
    if isinstance(e, Let):
        return Let(new[0], new[1], new[2])
    if isinstance(e, If):
        return If(new[0], new[1], new[2])
    if isinstance(e, Function):
        return Function(new[:-1], new[-1], e.attrs)
    raise TypeError(f"{type(e).__name__} has no children")


def rewrite(root: Expr, post: Callable[[Expr, Expr], Expr]) -> Expr:
    """Bottom-up rewrite. `post(old, rebuilt)` gets each node after its children were rewritten
    (`rebuilt` is `old` over the new children) and returns the replacement."""
    memo: dict[int, Expr] = {}
    for e in post_order(root):
        rebuilt = with_children(e, tuple(memo[id(c)] for c in children(e)))
        memo[id(e)] = post(e, rebuilt)
    return memo[id(root)]


def free_vars(root: Expr) -> list:
    """Vars used in `root` but bound by no Function or Let inside it, in first-use order."""
    from kiln.ir.expr import Var

    bound: set[int] = set()
    for e in post_order(root):
        if isinstance(e, Function):
            bound.update(id(p) for p in e.params)
        elif isinstance(e, Let):
            bound.add(id(e.var))
    out, seen = [], set()
    for e in post_order(root):
        if isinstance(e, Var) and id(e) not in bound and id(e) not in seen:
            seen.add(id(e))
            out.append(e)
    return out
