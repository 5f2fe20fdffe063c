"""CombineParallelConv2D and CombineParallelDense: branches that apply the same kind of op to
the same input become one wider op plus a slice per branch.

A group is calls in one scope with the same input (the same node), the same attributes and
weights that differ only in output size. The weights (and biases) are concatenated along the
output axis (at compile time when constant) and each branch reads its slice of the output.
Weights and biases must be leaves (constants or parameters) so the combined call depends on
nothing a branch computes. A group needs at least PassContext.config[
"combine_parallel_conv2d.min_num_branches"] (or "combine_parallel_dense.min_num_branches") members.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kiln.errors import TypeInferenceError
from kiln.ir.attrs import attrs_equal
from kiln.ir.expr import Call, Constant, Expr, Function, Op, Var, children, is_absent
from kiln.ir.module import IRModule
from kiln.ir.types import TensorType
from kiln.ir.visitor import post_order, with_children
from kiln.op.registry import get_op
from kiln.transform.fuse_ops import nested_scopes, scope_nodes
from kiln.transform.infra import PassContext, function_pass

DEFAULT_MIN_BRANCHES = 3


@dataclass(frozen=True)
class Branch:
    """One member's view: its weight, its bias (None: absent) and its output size."""

    call: Call
    weight: Expr
    bias: Expr | None
    size: int


@dataclass(frozen=True)
class Family:
    """How an op is combined: which calls qualify, along which axes weights/bias/output join."""

    op: str
    branch: Callable[[Call], Branch | None]
    key: Callable[[Call], tuple]
    weight_axis: Callable[[Call], int]
    out_axis: Callable[[Call], int]


def _leaf(e: Expr | None) -> bool:
    return e is None or isinstance(e, (Constant, Var))


def _static(e: Expr) -> tuple[int, ...] | None:
    t = e.type
    return tuple(t.shape) if isinstance(t, TensorType) and t.is_static else None  # type: ignore[arg-type]


def _conv_branch(call: Call) -> Branch | None:
    x, w = call.args[0], call.args[1]
    b = call.args[2] if len(call.args) > 2 and not is_absent(call.args[2]) else None
    ws = _static(w)
    if ws is None or len(ws) != 4 or call.attrs.group != 1 or not _leaf(w) or not _leaf(b):
        return None
    if not isinstance(x.type, TensorType) or x.type.ndim != 4:
        return None
    return Branch(call, w, b, ws[0])


def _matmul_branch(call: Call) -> Branch | None:
    x, w = call.args
    ws = _static(w)
    if ws is None or len(ws) != 2 or not _leaf(w) or not isinstance(x.type, TensorType):
        return None
    if x.type.ndim is None or x.type.ndim < 2:
        return None  # the output of a 1-D x has no row axis; keep it simple
    return Branch(call, w, None, ws[1])


def _gemm_branch(call: Call) -> Branch | None:
    w = call.args[1]
    c = call.args[2] if len(call.args) > 2 and not is_absent(call.args[2]) else None
    ws = _static(w)
    if ws is None or not _leaf(w) or not _leaf(c):
        return None
    n = ws[0] if call.attrs.transB else ws[1]
    if c is not None and (_static(c) not in ((n,), (1, n))):
        return None  # only a per-column bias splits along the output columns
    return Branch(call, w, c, n)


def _gemm_k(call: Call):
    ws = call.args[1].type.shape  # type: ignore[union-attr]
    return ws[1] if call.attrs.transB else ws[0]


def _bias_rank(call: Call) -> int | None:
    c = call.args[2] if len(call.args) > 2 and not is_absent(call.args[2]) else None
    return None if c is None else c.type.ndim  # type: ignore[union-attr]


def _kernel(call: Call) -> tuple:
    return tuple(call.args[1].type.shape[1:])  # type: ignore[union-attr]


FAMILIES: dict[str, Family] = {
    "combine-parallel-conv2d": Family(
        "nn.conv", _conv_branch, key=lambda c: (_kernel(c), _bias_rank(c)),
        weight_axis=lambda c: 0, out_axis=lambda c: 1),
    "combine-parallel-dense/mat_mul": Family(
        "linalg.mat_mul", _matmul_branch, key=lambda c: (c.args[1].type.shape[0],),
        weight_axis=lambda c: 1, out_axis=lambda c: c.type.ndim - 1),
    "combine-parallel-dense/gemm": Family(
        "linalg.gemm", _gemm_branch, key=lambda c: (_gemm_k(c), _bias_rank(c)),
        weight_axis=lambda c: 0 if c.attrs.transB else 1, out_axis=lambda c: 1),
}


def _scopes(fn: Function) -> dict[int, int]:
    """id(node) -> index of the scope (function body, If branch) that evaluates it."""
    owner: dict[int, int] = {}
    todo: list[tuple[Expr, set[int]]] = [(fn.body, {id(p) for p in fn.params})]
    k = -1
    while todo:
        root, outer = todo.pop()
        nodes = scope_nodes(root, outer)
        k += 1
        mine = {id(e) for e in nodes}
        for e in nodes:
            owner[id(e)] = k
            for inner in nested_scopes(e):
                params = {id(p) for p in e.params} if isinstance(e, Function) else set()
                todo.append((inner, outer | mine | params))
    return owner


def _groups(fn: Function, fam: Family, min_branches: int) -> list[list[Branch]]:
    scope = _scopes(fn)
    groups: list[list[Branch]] = []
    index: dict[tuple, list[Branch]] = {}
    for e in post_order(fn):
        if not (isinstance(e, Call) and isinstance(e.op, Op) and e.op.name == fam.op):
            continue
        br = fam.branch(e)
        if br is None:
            continue
        k = (id(e.args[0]), scope.get(id(e), -1), fam.key(e))
        for members in index.get(k, []):
            if attrs_equal(members[0].call.attrs, e.attrs):
                members.append(br)
                break
        else:
            index.setdefault(k, []).append([br])
            groups.append(index[k][-1])
    return [g for g in groups if len(g) >= min_branches]


def _concat(parts: list[Expr], axis: int) -> Expr:
    if all(isinstance(p, Constant) for p in parts):
        return Constant(np.concatenate([p.data for p in parts], axis=axis))
    return get_op("tensor.concat")(*parts, attrs=get_op("tensor.concat").attrs_type(axis=axis))


def combined_call(group: list[Branch], x: Expr, fam: Family) -> Expr:
    """The one wide call of a group, over the (rewritten) input `x`."""
    proto = group[0].call
    w = _concat([b.weight for b in group], fam.weight_axis(proto))
    args = [x, w]
    if group[0].bias is not None:
        args.append(_concat([b.bias for b in group], _bias_axis(group[0].bias)))  # type: ignore[misc]
    return Call(proto.op, tuple(args), proto.attrs, proto.name)


def _bias_axis(bias: Expr) -> int:
    return bias.type.ndim - 1  # type: ignore[union-attr]


def _slice(y: Expr, start: int, size: int, axis: int) -> Expr:
    def vec(v: int) -> Constant:
        return Constant(np.array([v], np.int64))
    return get_op("tensor.slice")(y, vec(start), vec(start + size), vec(axis))


def combine(fn: Function, fam: Family, min_branches: int) -> Function:
    """`fn` with every qualifying group of `fam` calls combined."""
    groups = dict(enumerate(_groups(fn, fam, min_branches)))
    plan = _plan_checked(groups, fam)
    if not plan:
        return fn
    built: dict[int, Expr] = {}
    memo: dict[int, Expr] = {}
    for e in post_order(fn):
        new = with_children(e, tuple(memo[id(c)] for c in children(e)))
        if id(e) in plan:
            g, off, size = plan[id(e)]
            if g not in built:
                built[g] = combined_call(groups[g], new.args[0], fam)  # type: ignore[union-attr]
            new = _slice(built[g], off, size, fam.out_axis(e))  # type: ignore[arg-type]
        memo[id(e)] = new
    return memo[id(fn)]  # type: ignore[return-value]


def _plan_checked(groups: dict[int, list[Branch]], fam: Family) -> dict[int, tuple[int, int, int]]:
    """id(call) -> (group, output offset, output size) for every group whose combined call type-checks and
    whose slices have exactly the types of the calls they replace."""
    plan: dict[int, tuple[int, int, int]] = {}
    for g, group in groups.items():
        try:
            y = combined_call(group, group[0].call.args[0], fam)
            off, mine = 0, {}
            for br in group:
                if _slice(y, off, br.size, fam.out_axis(br.call)).type != br.call.type:
                    raise TypeInferenceError("slice type differs")
                mine[id(br.call)] = (g, off, br.size)
                off += br.size
        except TypeInferenceError:
            continue
        plan.update(mine)
    return plan


def _min_branches(ctx: PassContext, name: str) -> int:
    return max(2, int(ctx.config.get(f"{name.replace('-', '_')}.min_num_branches", DEFAULT_MIN_BRANCHES)))


@function_pass("combine-parallel-conv2d", opt_level=3, config=("combine_parallel_conv2d.min_num_branches",))
def combine_parallel_conv2d(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
    """Parallel 2-D convs on one input become one conv with more output channels, then slices."""
    return combine(fn, FAMILIES["combine-parallel-conv2d"], _min_branches(ctx, "combine-parallel-conv2d"))


@function_pass("combine-parallel-dense", opt_level=3, config=("combine_parallel_dense.min_num_branches",))
def combine_parallel_dense(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
    """Parallel mat_muls / gemms on one input become one wider product, then slices."""
    n = _min_branches(ctx, "combine-parallel-dense")
    fn = combine(fn, FAMILIES["combine-parallel-dense/mat_mul"], n)
    return combine(fn, FAMILIES["combine-parallel-dense/gemm"], n)
