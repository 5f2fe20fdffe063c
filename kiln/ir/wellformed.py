"""Well-formedness: every Var used inside the scope of its one binder, every GlobalVar a function
of the module, and every stored type what the node's type rule gives for its current children.
Passes can break these silently (a rewrite that drops a Let, a stale type); this catches it."""

from __future__ import annotations

from kiln.errors import KilnError, WellFormednessError
from kiln.ir.expr import Call, Expr, Function, GlobalVar, If, Let, Op, Tuple, TupleGetItem, Var
from kiln.ir.module import IRModule
from kiln.ir.types import FuncType, TupleType, compatible, join, type_str
from kiln.ir.visitor import post_order

_EMPTY: frozenset[int] = frozenset()


def check_well_formed(x: IRModule | Expr) -> None:
    """Raise WellFormednessError on the first broken invariant. A lone expression may use free
    Vars (its inputs), but not Vars bound inside it; a module function may use none."""
    binders: dict[int, tuple[int, str]] = {}  # Var -> (its binder, where)
    if isinstance(x, IRModule):
        for name, fn in x.functions.items():
            _check(fn, x, binders, f"@{name}")
    else:
        _check(x, None, binders, "the expression")


def describe(e: Expr) -> str:
    """A short name for a node in messages."""
    if isinstance(e, Call):
        head = e.op.name if isinstance(e.op, Op) else "call of a function value"
        return head + (f" (node '{e.name}')" if e.name else "")
    if isinstance(e, Var):
        return f"%{e.name}"
    if isinstance(e, GlobalVar):
        return f"@{e.name}"
    return type(e).__name__


def _check(root: Expr, mod: IRModule | None, binders: dict[int, tuple[int, str]], where: str) -> None:
    free: dict[int, frozenset[int]] = {}
    vars_: dict[int, Var] = {}
    for e in post_order(root):
        if isinstance(e, Var):
            vars_[id(e)] = e
            free[id(e)] = frozenset((id(e),))
            continue
        bound = e.params if isinstance(e, Function) else (e.var,) if isinstance(e, Let) else ()
        for i, v in enumerate(bound):
            first = binders.setdefault(id(v), (id(e), f"a {type(e).__name__} in {where}"))
            if first[0] != id(e) or v in bound[:i]:
                raise WellFormednessError(f"in {where}: %{v.name} is bound twice ({first[1]} and "
                                          f"a {type(e).__name__})")
        if isinstance(e, Function):
            free[id(e)] = free[id(e.body)] - {id(p) for p in e.params}
        elif isinstance(e, Let):
            free[id(e)] = _union([free[id(e.value)], free[id(e.body)] - {id(e.var)}])
        else:
            free[id(e)] = _union([free[id(c)] for c in _used(e)])
        _check_node(e, mod, where)
    for k in free[id(root)]:
        if k in binders or mod is not None:
            v = vars_[k]
            what = "is used outside the scope of its binder" if k in binders else "is unbound"
            raise WellFormednessError(f"in {where}: variable %{v.name} ({type_str(v.type)}) {what}")


def _used(e: Expr) -> tuple[Expr, ...]:
    if isinstance(e, Call):
        return ((e.op,) if isinstance(e.op, Expr) else ()) + e.args
    if isinstance(e, Tuple):
        return e.fields
    if isinstance(e, TupleGetItem):
        return (e.tuple_value,)
    if isinstance(e, If):
        return (e.cond, e.then_branch, e.else_branch)
    return ()


def _union(sets: list[frozenset[int]]) -> frozenset[int]:
    """Union that reuses a child's set when it covers the rest (keeps chains linear)."""
    distinct = list({id(s): s for s in sets if s}.values())
    if not distinct:
        return _EMPTY
    big = max(distinct, key=len)
    return big if all(s <= big for s in distinct) else frozenset().union(*distinct)


def _check_node(e: Expr, mod: IRModule | None, where: str) -> None:
    def fail(msg: str) -> WellFormednessError:
        return WellFormednessError(f"in {where}: {describe(e)}: {msg}")

    if isinstance(e, GlobalVar) and mod is not None:
        if e.name not in mod.functions:
            raise fail("refers to no function of the module")
        if e.type != mod.functions[e.name].type:
            raise fail(f"has type {e.type} but the function has type {mod.functions[e.name].type}")
    if isinstance(e, Let) and not compatible(e.var.type, e.value.type):
        raise fail(f"let %{e.var.name} is declared {e.var.type} but bound to a value of type {e.value.type}")
    if isinstance(e, Call) and not isinstance(e.op, Op):
        ft = e.op.type
        if not isinstance(ft, FuncType) or len(ft.params) != len(e.args):
            raise fail(f"callee of type {ft} does not take {len(e.args)} arguments")
        for i, (p, a) in enumerate(zip(ft.params, e.args)):
            if not compatible(p, a.type):
                raise fail(f"argument {i} has type {a.type}; the callee expects {p}")
    try:
        want = _expected_type(e)
    except (KilnError, ValueError) as exc:
        raise fail(f"type check fails: {exc}") from None
    if want is not None and want != e.type:
        raise fail(f"stored type {e.type} but its type rule gives {want}")


def _expected_type(e: Expr):
    """The type `e` should have given its children (None: nothing to re-check)."""
    if isinstance(e, Call):
        return e.op.infer_type(e.args, e.attrs) if isinstance(e.op, Op) else e.op.type.ret
    if isinstance(e, Tuple):
        return TupleType(tuple(f.type for f in e.fields))
    if isinstance(e, TupleGetItem):
        t = e.tuple_value.type
        if not isinstance(t, TupleType) or not 0 <= e.index < len(t.fields):
            raise ValueError(f"index {e.index} on a value of type {t}")
        return t.fields[e.index]
    if isinstance(e, Let):
        return e.body.type
    if isinstance(e, If):
        return join(e.then_branch.type, e.else_branch.type)
    if isinstance(e, Function):
        return FuncType(tuple(p.type for p in e.params), e.body.type)
    return None
