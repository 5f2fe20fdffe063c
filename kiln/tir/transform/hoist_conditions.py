"""hoist_conditions: a run of statements with many branches on one condition becomes one branch over
two copies of the run, each with that condition decided.

After unroll and unswitch, a depthwise conv's tile is straight-line code: for every tap and column a
simd store under `if (row in bounds)` (the zero padding, inlined, so that no padded copy is written).
gcc keeps the tile's accumulators in registers inside one basic block, but at every join of those
branches it spills and reloads all of them (14 ymm stores and 14 memory-operand FMAs per tap row
in mobilenet_v2's 14x14 depthwise convs). The condition is the same at every branch (it reads only
loop variables bound outside the run), so it is decided once for the whole run: the common case, an
interior row, is then one basic block.

Only conditions that at least MIN_BRANCHES branches of the run test are hoisted, at most
MAX_CONDITIONS of them per run, and only while all the copies together stay under MAX_NODES tir
nodes: a 3x3 tile of 8 columns gets both its row tests hoisted (its first and last columns' tests
stay inside, 6 branches a copy), one of 14 columns (~3,000 nodes) its top row test, and a 5x5 tile
of 14 columns (~9,000 nodes) none. Measured on 1 thread: mobilenet_v2's depthwise convs 1.11 ->
0.88 ms in all (the stride-2 one at 112x112 0.195 -> 0.150 ms). Cold builds: mobilenet_v2 the same
(15-22 s), an EfficientNet-like model 19.8 -> 24.7 s; without the node limit 73 s (sixteen copies of
its 5x5 tiles) for no gain.
"""

from __future__ import annotations

from collections import Counter

from kiln.tir import expr as E
from kiln.tir import stmt as S
from kiln.tir.functor import map_expr, map_stmt, walk

MIN_BRANCHES = 2
MAX_CONDITIONS = 4
MAX_NODES = 8_000  # tir nodes of all the copies of one run


def _atoms(cond: E.PrimExpr) -> list[E.PrimExpr]:
    """The conjuncts of a condition (a decided `true` conjunct dropped)."""
    if isinstance(cond, E.And):
        return _atoms(cond.a) + _atoms(cond.b)
    if isinstance(cond, E.IntImm) and cond.value:
        return []
    return [cond]


def _branch_conditions(stmts: tuple[S.Stmt, ...]) -> Counter:
    """How many of the run's own branches (not those nested in loops) test each conjunct, in the order
    they first appear: most_common breaks ties by that order. (A set's order follows the hashes of the
    Vars inside, which are addresses: the same model hoisted another condition in another process.)"""
    counts: Counter = Counter()
    for s in stmts:
        if isinstance(s, S.IfThenElse) and not any(isinstance(x, E.BufferLoad) for x in walk(s.cond)):
            counts.update(list(dict.fromkeys(_atoms(s.cond))))  # a list: a mapping would be counts
    return counts


def _decide(s: S.Stmt, atom: E.PrimExpr, value: bool) -> S.Stmt:
    """`s` with every occurrence of `atom` in its branch conditions replaced by `value`, and the
    branches that this decides taken."""
    known = E.IntImm(int(value), atom.dtype)

    def fold(e: E.PrimExpr) -> E.PrimExpr | None:
        if e == atom:
            return known
        if isinstance(e, E.And) and isinstance(e.a, E.IntImm):
            return e.b if e.a.value else e.a
        if isinstance(e, E.And) and isinstance(e.b, E.IntImm):
            return e.a if e.b.value else e.b
        return None

    def take(x: S.Stmt) -> S.Stmt | None:
        if isinstance(x, S.IfThenElse):
            c = map_expr(x.cond, fold)
            if isinstance(c, E.IntImm):
                return x.then_case if c.value else (x.else_case or S.SeqStmt(()))
            return S.IfThenElse(c, x.then_case, x.else_case)
        return None

    return map_stmt(s, fstmt=take)


def _hoist(run: S.Stmt, budget: int, nodes: int) -> S.Stmt:
    """`run` with up to `budget` conditions hoisted, its copies together at most `nodes` tir nodes."""
    if budget < 1 or not isinstance(run, S.SeqStmt):
        return run
    counts = _branch_conditions(run.stmts)
    if not counts:
        return run
    atom, n = counts.most_common(1)[0]
    if n < MIN_BRANCHES or 2 * sum(1 for _ in walk(run)) > nodes:
        return run
    then, other = _decide(run, atom, True), _decide(run, atom, False)
    return S.IfThenElse(atom, _hoist(then, budget - 1, nodes // 2), _hoist(other, budget - 1, nodes // 2))


def hoist_conditions(func: S.PrimFunc) -> S.PrimFunc:
    """Hoist the branch conditions that a run of statements repeats (see the module docstring). A
    function with no such run is returned as it is (the same object), so the pipeline's simplify
    after this pass is skipped for it (1.2 s of mobilenet_v2's 15 s build)."""
    hoisted = False

    def rewrite(s: S.Stmt) -> S.Stmt | None:
        nonlocal hoisted
        if not isinstance(s, S.SeqStmt):
            return None
        out = _hoist(s, MAX_CONDITIONS, MAX_NODES)
        if out is s:
            return None
        hoisted = True
        return out

    body = map_stmt(func.body, fstmt=rewrite)
    return S.PrimFunc(func.name, func.params, body, func.attrs) if hoisted else func
