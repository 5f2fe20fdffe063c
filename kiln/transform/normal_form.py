"""ToANormalForm and ToGraphNormalForm.

A-normal form binds every compound expression to a `let` in the scope (function body or If
branch) where it is first needed, which fixes evaluation order and scope. Graph normal form
substitutes every `let` away, leaving a dataflow graph with shared sub-expressions.
"""

from __future__ import annotations

from kiln.ir.expr import Constant, Expr, Function, GlobalVar, If, Let, Var, children
from kiln.ir.module import IRModule
from kiln.ir.visitor import post_order, scope_children, with_children
from kiln.transform.infra import PassContext, function_pass


def _atomic(e: Expr) -> bool:
    return isinstance(e, (Var, GlobalVar, Constant, Function)) or (not children(e) and not isinstance(e, If))


def to_anf_expr(root: Expr) -> Expr:
    """`root` in A-normal form. Each scope (function body, If branch) gets its own let chain; a
    node is bound in the scope that first needs it, and reused by the scopes nested in that one."""
    return _Anf().scope(to_gnf_expr(root), {})


class _Anf:
    def scope(self, root: Expr, outer: dict[int, Expr]) -> Expr:
        bound = dict(outer)  # id(original node) -> Var/atom that holds it in this scope
        bindings: list[tuple[Var, Expr]] = []
        for e in post_order_local(root, outer):
            if id(e) in bound:
                continue
            if isinstance(e, Function):
                body = self.scope(e.body, {**bound, **{id(p): p for p in e.params}})
                bound[id(e)] = Function(e.params, body, e.attrs)
                continue
            if isinstance(e, If):
                new = If(bound[id(e.cond)], self.scope(e.then_branch, bound), self.scope(e.else_branch, bound))
            elif _atomic(e):
                bound[id(e)] = e
                continue
            else:
                new = with_children(e, tuple(bound[id(c)] for c in children(e)))
            v = Var(f"x{len(bindings)}", new.type)
            bindings.append((v, new))
            bound[id(e)] = v
        body = bound[id(root)]
        for v, val in reversed(bindings):
            body = Let(v, val, body)
        return body


def post_order_local(root: Expr, outer: dict[int, Expr]) -> list[Expr]:
    """Post-order of the nodes evaluated in this scope: not inside Function bodies or If branches
    (those become scopes of their own), and not already bound outside."""
    return post_order(root, scope_children, set(outer))


@function_pass("to-a-normal-form", opt_level=0)
def to_a_normal_form(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
    return Function(fn.params, to_anf_expr(fn.body), fn.attrs)


@function_pass("to-graph-normal-form", opt_level=0)
def to_graph_normal_form(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
    return to_gnf_expr(fn)


def to_gnf_expr(root: Expr) -> Expr:
    """Substitute every let-bound variable by its (already substituted) value."""
    memo: dict[int, Expr] = {}
    stack: list[tuple[Expr, bool]] = [(root, False)]
    while stack:
        e, expanded = stack.pop()
        if id(e) in memo:
            continue
        kids = (e.value,) if isinstance(e, Let) else children(e)
        if not expanded:
            stack.append((e, True))
            stack.extend((c, False) for c in reversed(kids) if id(c) not in memo)
            continue
        if isinstance(e, Let):
            memo[id(e.var)] = memo[id(e.value)]
            if id(e.body) not in memo:  # the body could not run before the var was known
                stack.extend([(e, True), (e.body, False)])
                continue
            memo[id(e)] = memo[id(e.body)]
        else:
            memo[id(e)] = with_children(e, tuple(memo[id(c)] for c in children(e)))
    return memo[id(root)]
