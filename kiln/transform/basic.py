"""Bookkeeping passes: type inference, unused functions, dead code, function inlining."""

from __future__ import annotations

from kiln.ir.expr import Call, Expr, Function, GlobalVar, Let, Var, children
from kiln.ir.module import IRModule
from kiln.ir.visitor import post_order, rewrite, with_children
from kiln.transform.infra import PassContext, function_pass, module_pass


def retype(root: Expr) -> Expr:
    """Rebuild every node so each type is inferred afresh from its (possibly retyped) children."""
    memo: dict[int, Expr] = {}
    for e in post_order(root):
        kids = tuple(memo[id(c)] for c in children(e))
        if isinstance(e, Var):
            memo[id(e)] = e
        elif kids:
            memo[id(e)] = _force_rebuild(e, kids)
        else:
            memo[id(e)] = e
    return memo[id(root)]


def _force_rebuild(e: Expr, kids: tuple[Expr, ...]) -> Expr:
    """`e` over `kids`, always a new node (building it re-runs the type relation)."""
    rebuilt = with_children(e, kids)
    return rebuilt if rebuilt is not e else _clone(e, kids)


def _clone(e: Expr, kids: tuple[Expr, ...]) -> Expr:
    from kiln.ir.expr import If, Tuple, TupleGetItem

    if isinstance(e, Call):
        return Call(kids[0], kids[1:], e.attrs, e.name) if isinstance(e.op, Expr) else Call(e.op, kids, e.attrs, e.name)
    if isinstance(e, Tuple):
        return Tuple(kids)
    if isinstance(e, TupleGetItem):
        return TupleGetItem(kids[0], e.index)
    if isinstance(e, Let):
        return Let(kids[0], kids[1], kids[2])
    if isinstance(e, If):
        return If(*kids)
    if isinstance(e, Function):
        return Function(kids[:-1], kids[-1], e.attrs)
    return e


@function_pass("infer-type", opt_level=0)
def infer_type(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
    """Re-run every type relation (after a pass that changed argument types)."""
    return retype(fn)


@module_pass("remove-unused-functions", opt_level=0)
def remove_unused_functions(mod: IRModule, ctx: PassContext) -> IRModule:
    """Keep only the functions reachable from `main` through GlobalVar references."""
    keep, todo = {"main"}, ["main"]
    while todo:
        for e in post_order(mod.functions[todo.pop()]):
            if isinstance(e, GlobalVar) and e.name not in keep and e.name in mod.functions:
                keep.add(e.name)
                todo.append(e.name)
    if keep == set(mod.functions):
        return mod
    return IRModule({k: f for k, f in mod.functions.items() if k in keep}, mod.output_names, dict(mod.metadata))


def _used_vars(root: Expr) -> set[int]:
    """Vars that appear anywhere other than as a binder."""
    used: set[int] = set()
    for e in post_order(root):
        uses = (e.value, e.body) if isinstance(e, Let) else (e.body,) if isinstance(e, Function) else children(e)
        used.update(id(c) for c in uses if isinstance(c, Var))
    return used


@function_pass("dead-code-elimination", opt_level=0)
def dead_code_elimination(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
    """Drop `let` bindings whose variable is never used (every operator is pure), to a fixpoint."""
    while True:
        used = _used_vars(fn)
        out = rewrite(fn, lambda old, new, used=used: (
            new.body if isinstance(new, Let) and id(new.var) not in used else new))
        if out is fn:
            return fn
        fn = out


@module_pass("inline", opt_level=1)
def inline(mod: IRModule, ctx: PassContext) -> IRModule:
    """Inline calls of global functions marked Inline=1 (substituting arguments for parameters)."""
    targets = {n for n, f in mod.functions.items() if f.attr("Inline") and n != "main"}
    if not targets:
        return mod

    def post(old: Expr, new: Expr) -> Expr:
        if isinstance(new, Call) and isinstance(new.op, GlobalVar) and new.op.name in targets:
            callee = mod.functions[new.op.name]
            return substitute(callee.body, dict(zip((id(p) for p in callee.params), new.args)))
        return new

    out = {n: rewrite(f, post) for n, f in mod.functions.items() if n not in targets}
    return IRModule(out, mod.output_names, dict(mod.metadata))


def substitute(root: Expr, mapping: dict[int, Expr]) -> Expr:
    """Replace Vars (keyed by id) by expressions."""
    return rewrite(root, lambda old, new: mapping.get(id(old), new))
