"""A model's main function as the sequence a pipeline cuts: its operators in one topological order.

Every operator that depends on an input is a node, placed once; what depends only on constants (a
folded subgraph in waiting) is no node: each stage that reads it holds its own copy, as it holds its
weights. A value crosses the cut before position `b` when it is made before `b` (an input counts as
made at -1) and read at or after `b`, or is an output of the model (read at `len(nodes)`).
"""

from __future__ import annotations

from dataclasses import dataclass

from kiln.errors import KilnError
from kiln.ir.expr import Call, Constant, Expr, Function, If, Let, Tuple, TupleGetItem, Var, children
from kiln.ir.module import IRModule
from kiln.ir.visitor import post_order

INPUT_POS = -1


@dataclass(frozen=True)
class StageGraph:
    """`nodes` in topological order; `pos` and `last_use` by id of a node or input; `outputs` by name."""

    module: IRModule
    nodes: tuple[Expr, ...]
    pos: dict[int, int]
    last_use: dict[int, int]
    outputs: tuple[tuple[str, Expr], ...]

    @property
    def inputs(self) -> tuple[Var, ...]:
        return self.module.main.params

    def value_name(self, e: Expr) -> str:
        """The name a value has between stages: an input keeps its own, an operator's is made from its place."""
        if isinstance(e, Var):
            return e.name
        p = self.pos.get(id(e))
        return f"kiln_cut_{p}" if p is not None else f"kiln_const_{id(e):x}"


def stage_graph(mod: IRModule) -> StageGraph:
    """The nodes of `mod`'s main; a KilnError for what a pipeline cannot cut (control flow, calls of functions)."""
    if set(mod.functions) != {"main"}:
        others = sorted(set(mod.functions) - {"main"})
        raise KilnError(f"a pipeline cuts one function, main; this module also has {others}")
    fn = mod.main
    outs = fn.body.fields if isinstance(fn.body, Tuple) else (fn.body,)
    params = {id(p) for p in fn.params}
    constant: set[int] = set()
    nodes: list[Expr] = []
    seen: set[int] = set()
    for out in outs:
        for e in post_order(out, skip=frozenset(seen)):
            seen.add(id(e))
            _check_node(e, params)
            if isinstance(e, Constant) or (not isinstance(e, Var) and all(id(c) in constant for c in children(e))):
                constant.add(id(e))
            elif not isinstance(e, Var):
                nodes.append(e)
    pos = {id(e): i for i, e in enumerate(nodes)}
    last_use = {id(p): INPUT_POS for p in fn.params}
    for i, e in enumerate(nodes):
        last_use.setdefault(id(e), i)
        for c in children(e):
            if id(c) in last_use:
                last_use[id(c)] = max(last_use[id(c)], i)
    for out in outs:
        last_use[id(out)] = len(nodes)
    names = list(mod.output_names) or [f"output{i}" for i in range(len(outs))]
    return StageGraph(mod, tuple(nodes), pos, last_use, tuple(zip(names, outs, strict=True)))


def _check_node(e: Expr, params: set[int]) -> None:
    if isinstance(e, (Let, If, Function)):
        raise KilnError(f"a pipeline cuts dataflow graphs; main holds a {type(e).__name__}, which it cannot place")
    if isinstance(e, Var) and id(e) not in params:
        raise KilnError(f"main uses the variable {e.name!r}, which is not one of its inputs")
    if isinstance(e, Call) and isinstance(e.op, Expr):
        raise KilnError("a pipeline cuts calls of operators; main calls a function value")
    if not isinstance(e, (Call, Constant, Var, Tuple, TupleGetItem)):
        raise KilnError(f"a pipeline cannot place a {type(e).__name__} of main")
