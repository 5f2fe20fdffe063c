"""FuseOps: group operators into fused kernels with TVM's post-dominator algorithm.

Each scope (a function body, an If branch, a loop body) is a dataflow graph. The immediate
post-dominator of a node is the nearest node every path from it to the scope's outputs passes
through. A node fuses into its post-dominator when every node on the paths between them has a
pattern the fusion rule allows:
- OUT_EWISE_FUSABLE (conv, matmul) absorbs a following chain of elementwise/broadcast ops;
- ELEMWISE/BROADCAST fuse into an injective or reduction post-dominator (intermediate nodes
  injective at most; the sink may be an already-fused conv group);
- INJECTIVE/TUPLE chains fuse in a second phase, after the conv groups are complete;
- COMM_REDUCE only takes producers; OPAQUE never fuses.
A group becomes a Function marked Primitive=1 (one future kernel) called from its scope.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kiln.errors import KilnError
from kiln.ir.expr import Call, Constant, Expr, Function, If, Op, Tuple, TupleGetItem, Var, children
from kiln.ir.module import IRModule
from kiln.ir.types import TensorType
from kiln.ir.visitor import post_order, scope_children, with_children
from kiln.op.registry import Pattern
from kiln.transform.infra import PassContext, function_pass
from kiln.transform.normal_form import to_gnf_expr

DEFAULT_MAX_GROUP = 256  # PassContext.config["fuse_ops.max_group_size"]
INLINE_CONSTANT_ELEMENTS = 1  # float constants this small stay inside the fused function
INLINE_INDEX_ELEMENTS = 1024  # integer constants (shapes, axes, indices) up to this size too


@dataclass(eq=False)
class _Node:
    expr: Expr
    index: int
    pattern: Pattern
    outputs: list[tuple[_Node, Pattern]] = field(default_factory=list)
    extern: bool = False  # used outside this scope's dataflow: never an intermediate of a group
    # post-dominator tree
    parent: _Node | None = None
    depth: int = 0
    path_pattern: Pattern = Pattern.ELEMWISE
    # union-find group
    group: _Node | None = None
    size: int = 1
    group_pattern: Pattern = Pattern.OPAQUE

    def root(self) -> _Node:
        n = self
        while n.group is not None:
            n = n.group
        g = self
        while g.group is not None and g.group is not n:  # path compression
            g.group, g = n, g.group
        return n


def node_pattern(e: Expr) -> Pattern:
    if isinstance(e, Call) and isinstance(e.op, Op):
        if any(isinstance(a, Function) for a in e.args):
            return Pattern.OPAQUE
        if not isinstance(e.type, TensorType) and e.op.pattern <= Pattern.INJECTIVE:
            if not _tuple_of_tensors(e.type):
                return Pattern.OPAQUE
        return e.op.pattern
    if isinstance(e, Tuple):
        return Pattern.TUPLE if _tuple_of_tensors(e.type) and e.fields else Pattern.OPAQUE
    if isinstance(e, TupleGetItem):
        return Pattern.INJECTIVE
    return Pattern.OPAQUE


def _tuple_of_tensors(t) -> bool:
    from kiln.ir.types import TupleType

    return isinstance(t, TupleType) and all(isinstance(f, TensorType) for f in t.fields)


def scope_nodes(root: Expr, outer: set[int]) -> list[Expr]:
    """The dataflow nodes of one scope in topological order: reachable from `root` without entering
    Function bodies or If branches, and not owned by an enclosing scope."""
    return post_order(root, scope_children, outer)


def nested_scopes(e: Expr) -> list[Expr]:
    if isinstance(e, Function):
        return [e.body]
    if isinstance(e, If):
        return [e.then_branch, e.else_branch]
    return []


class _Graph:
    def __init__(self, root: Expr, outer: set[int]):
        exprs = scope_nodes(root, outer)
        self.nodes = [_Node(e, i, node_pattern(e)) for i, e in enumerate(exprs)]
        self.by_id = {id(n.expr): n for n in self.nodes}
        for n in self.nodes:
            n.group_pattern = n.pattern
            e = n.expr
            if isinstance(e, If):
                self._edge(e.cond, n, Pattern.OPAQUE)
            elif not isinstance(e, Function):
                for c in children(e):
                    self._edge(c, n, _edge_pattern(c, n))
        self.by_id[id(root)].extern = True
        for n in self.nodes:  # values captured by nested scopes must stay materialized
            for inner in nested_scopes(n.expr):
                for x in post_order(inner):
                    if id(x) in self.by_id:
                        self.by_id[id(x)].extern = True

    def _edge(self, child: Expr, consumer: _Node, pattern: Pattern) -> None:
        n = self.by_id.get(id(child))
        if n is not None:
            n.outputs.append((consumer, pattern))


def _edge_pattern(arg: Expr, consumer: _Node) -> Pattern:
    """A broadcasting consumer is elementwise along an argument that already has its output shape."""
    p = consumer.pattern
    if p == Pattern.TUPLE:
        return Pattern.INJECTIVE
    out = consumer.expr.type
    if p == Pattern.BROADCAST and isinstance(arg.type, TensorType) and isinstance(out, TensorType) \
            and arg.type.shape is not None and arg.type.shape == out.shape:
        return Pattern.ELEMWISE
    return p


def _lca(a: _Node | None, b: _Node | None, pattern: Pattern) -> tuple[_Node | None, Pattern]:
    while a is not b:
        if a is None or b is None:
            return None, pattern
        if a.depth < b.depth:
            pattern, b = max(pattern, b.path_pattern), b.parent
        elif b.depth < a.depth:
            pattern, a = max(pattern, a.path_pattern), a.parent
        else:
            pattern = max(pattern, a.path_pattern, b.path_pattern)
            a, b = a.parent, b.parent
    return a, pattern


def post_dominators(g: _Graph) -> None:
    for n in reversed(g.nodes):
        if n.extern or not n.outputs:
            n.parent, n.depth, n.path_pattern = None, 1, Pattern.OPAQUE
            continue
        parent, pattern = n.outputs[0][0], n.outputs[0][1]
        for consumer, edge in n.outputs[1:]:
            parent, pattern = _lca(parent, consumer, max(pattern, edge))
        n.parent, n.path_pattern = parent, pattern
        n.depth = parent.depth + 1 if parent is not None else 1


class _Partitioner:
    def __init__(self, g: _Graph, max_size: int):
        self.g, self.max_size = g, max_size

    def _paths_ok(self, src: _Node, sink: _Node, ok) -> bool:
        seen: set[int] = set()
        total = src.root().size
        stack = [c for c, _ in src.outputs]
        while stack:
            n = stack.pop()
            if n.index in seen:
                continue
            seen.add(n.index)
            grp = n.root()
            if not ok(grp.group_pattern, n is sink):
                return False
            if n is sink:
                continue
            total += 1
            stack.extend(c for c, _ in n.outputs)
        return total + sink.root().size <= self.max_size

    def _commit(self, src: _Node, sink: _Node) -> None:
        target = sink.root()
        seen: set[int] = set()
        stack = [src]
        while stack:
            n = stack.pop()
            if n.index in seen or n is sink:
                continue
            seen.add(n.index)
            r = n.root()
            if r is not target:
                r.group = target
                target.size += r.size
                target.group_pattern = max(target.group_pattern, r.group_pattern)
            stack.extend(c for c, _ in n.outputs)

    def run(self) -> None:
        for phase in (0, 1, 2):
            for n in self.g.nodes:
                grp = n.root()
                dom = n.parent
                if dom is None or grp.group_pattern == Pattern.OPAQUE or n.extern:
                    continue
                if dom.root() is grp:
                    continue
                gp = grp.group_pattern
                if gp == Pattern.OUT_EWISE_FUSABLE:
                    if phase == 0 and n.path_pattern <= Pattern.ELEMWISE:
                        if self._paths_ok(n, dom, lambda k, sink: k <= Pattern.BROADCAST):
                            self._commit(n, dom)
                elif gp <= Pattern.BROADCAST:
                    if n.path_pattern <= Pattern.INJECTIVE or n.path_pattern == Pattern.COMM_REDUCE:
                        def ok(k, sink):
                            return k <= Pattern.INJECTIVE if not sink else k in (
                                Pattern.ELEMWISE, Pattern.BROADCAST, Pattern.INJECTIVE,
                                Pattern.COMM_REDUCE, Pattern.OUT_EWISE_FUSABLE)
                        if self._paths_ok(n, dom, ok):
                            self._commit(n, dom)
                elif gp in (Pattern.INJECTIVE, Pattern.TUPLE):
                    if phase == 1 and self._paths_ok(n, dom, lambda k, sink: k <= Pattern.INJECTIVE):
                        self._commit(n, dom)


def _groups(g: _Graph) -> dict[int, list[_Node]]:
    """Group root index -> members in topological order (only groups worth a function)."""
    groups: dict[int, list[_Node]] = {}
    for n in g.nodes:
        if n.pattern == Pattern.OPAQUE and not (isinstance(n.expr, Call) and isinstance(n.expr.op, Op)):
            continue  # vars, constants, ifs, functions, calls of functions: not kernels
        if any(isinstance(a, Function) for a in children(n.expr)):
            continue
        groups.setdefault(n.root().index, []).append(n)
    return {k: v for k, v in groups.items()
            if any(isinstance(m.expr, Call) for m in v)}


def _inline_constant(e: Expr) -> bool:
    """Small constants stay in the kernel; integer ones may decide shapes (reshape targets, axes), so
    turning them into parameters would lose static types."""
    if not isinstance(e, Constant):
        return False
    if e.data.dtype.kind in "biu":
        return e.data.size <= INLINE_INDEX_ELEMENTS
    return e.data.size <= INLINE_CONSTANT_ELEMENTS


def fuse_expr(root: Expr, max_size: int = DEFAULT_MAX_GROUP) -> Expr:
    """Fuse every scope of `root` (expected in graph normal form)."""
    plans: dict[int, tuple[list[_Node], _Node]] = {}  # id(output expr) -> (members, output)
    member_of: dict[int, int] = {}
    todo: list[tuple[Expr, set[int]]] = [(root, set())]
    while todo:
        scope_root, outer = todo.pop()
        g = _Graph(scope_root, outer)
        post_dominators(g)
        _Partitioner(g, max_size).run()
        inner_outer = outer | set(g.by_id)
        for n in g.nodes:
            todo.extend((s, inner_outer) for s in nested_scopes(n.expr))
        for members in _groups(g).values():
            ids = {id(m.expr) for m in members}
            outs = [m for m in members if m.extern or not m.outputs
                    or any(id(c.expr) not in ids for c, _ in m.outputs)]
            out = outs[-1] if len(outs) == 1 else None
            if out is None:  # defensive: a group must have one output; leave its ops unfused
                continue
            plans[id(out.expr)] = (members, out)
            for m in members:
                member_of[id(m.expr)] = id(out.expr)

    memo: dict[int, Expr] = {}
    for e in post_order(root):
        new = with_children(e, tuple(memo[id(c)] for c in children(e)))
        plan = plans.get(id(e))
        if plan is not None:
            new = _fused_call(plan[0], memo)
        memo[id(e)] = new
    return memo[id(root)]


def _fused_call(members: list[_Node], memo: dict[int, Expr]) -> Expr:
    """Call(Function(params, body, Primitive=1), external inputs) for one group."""
    ids = {id(m.expr) for m in members}
    params: list[Var] = []
    args: list[Expr] = []
    local: dict[int, Expr] = {}
    body_of: dict[int, Expr] = {}
    for m in members:
        if _field_of_outside_tuple(m.expr, ids):  # pass the field, not the whole tuple
            body_of[id(m.expr)] = _param(m.expr, params, args, local, memo)
            continue
        inline = _type_deciding(m.expr)
        new_kids = []
        for c in children(m.expr):
            if id(c) in ids:
                new_kids.append(body_of[id(c)])
            elif _inline_constant(c) or id(c) in inline or isinstance(c, Function) \
                    or (isinstance(c, Tuple) and not c.fields):
                new_kids.append(c)
            else:
                new_kids.append(_param(c, params, args, local, memo))
        body_of[id(m.expr)] = with_children(m.expr, tuple(new_kids))
    fn = Function(tuple(params), body_of[id(members[-1].expr)], {"Primitive": 1})
    name = members[-1].expr.name if isinstance(members[-1].expr, Call) else ""
    return Call(fn, tuple(args), None, name)


def _param(c: Expr, params: list[Var], args: list[Expr], local: dict[int, Expr], memo: dict[int, Expr]) -> Var:
    """The group parameter standing for outside value `c` (one per value)."""
    if id(c) not in local:
        local[id(c)] = Var(f"p{len(params)}", memo[id(c)].type)
        params.append(local[id(c)])
        args.append(memo[id(c)])
    return local[id(c)]


def _field_of_outside_tuple(e: Expr, ids: set[int]) -> bool:
    """A field of a tuple made outside the group: kernels and AOT take tensors, not tuples."""
    return isinstance(e, TupleGetItem) and id(e.tuple_value) not in ids


def _type_deciding(e: Expr) -> set[int]:
    """The constant arguments of call `e` to keep inline: all its small ones when the call's type
    depends on the value of any (Resize scales decide the output shape, and its roi travels with
    them); a parameter would make the type dynamic and the group uncompilable."""
    if not isinstance(e, Call) or not isinstance(e.op, Op):
        return set()
    small = [k for k, a in enumerate(e.args) if isinstance(a, Constant) and not _inline_constant(a)
             and a.data.size <= INLINE_INDEX_ELEMENTS]
    for k in small:
        hidden = e.args[:k] + (Var("hidden", e.args[k].type),) + e.args[k + 1:]
        try:
            same = e.op.infer_type(hidden, e.attrs) == e.type
        except KilnError:
            same = False
        if not same:
            return {id(e.args[j]) for j in small}
    return set()


@function_pass("fuse-ops", opt_level=1, config=("fuse_ops.max_group_size",))
def fuse_ops(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
    """Group operators into Primitive functions (one future kernel each)."""
    limit = int(ctx.config.get("fuse_ops.max_group_size", DEFAULT_MAX_GROUP))
    fn = to_gnf_expr(fn)
    return Function(fn.params, fuse_expr(fn.body, limit), fn.attrs)


@function_pass("defuse-ops", opt_level=0)
def defuse_ops(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
    """Inline every call of a Primitive function back into its caller."""
    from kiln.transform.basic import substitute

    memo: dict[int, Expr] = {}
    for e in post_order(fn):
        new = with_children(e, tuple(memo[id(c)] for c in children(e)))
        if isinstance(new, Call) and isinstance(new.op, Function) and new.op.attr("Primitive"):
            new = substitute(new.op.body, {id(p): a for p, a in zip(new.op.params, new.args)})
        memo[id(e)] = new
    return memo[id(fn)]
