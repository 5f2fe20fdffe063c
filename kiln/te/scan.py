"""Recurrences in te: `scan` runs a step (itself a te graph) once per time step, in one serial loop.

A plain compute cannot read its own earlier elements, so a recurrence (RNN cells, state-space
models) is one operation whose outputs are the state histories: out[k][0] = init[k] and
out[k][t + 1] = step(t, out[.][t], inputs)[k]. The step is an ordinary te graph over placeholders
(the states at t and the scan's inputs) with its own schedule, so its matmuls and activations get
parallel and vectorized loop nests. Lowering puts that graph's loops inside one serial loop over t:
each state placeholder reads the history at t, each new state is stored at t + 1, the step's
temporaries are allocated once outside the loop. The te evaluator runs the step with numpy per t.

ScanOp is an ExternOp whose body is tir (not a runtime-library call), so schedules already keep
what it reads at the root, in buffers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kiln.te.bound import canon
from kiln.te.schedule import Schedule, create_schedule
from kiln.te.tensor import ExternOp, PlaceholderOp, Tensor, compute, placeholder
from kiln.tir.expr import BufferLoad, IntImm, PrimExpr, Var, const
from kiln.tir.functor import map_expr, map_stmt
from kiln.tir.stmt import Allocate, Buffer, BufferStore, For, ForKind, Stmt, seq

StepFn = Callable[..., Sequence[Tensor]]
ScheduleFn = Callable[[Sequence[Tensor]], Schedule]


@dataclass(frozen=True, eq=False, kw_only=True)
class ScanOp(ExternOp):
    """Outputs: one history (steps + 1, *state shape) per state. `inputs` = inits, then the outer
    tensors the step reads through `input_phs`; `updates` are the step's new states."""

    steps: PrimExpr
    time: Var
    state_phs: tuple[Tensor, ...]
    input_phs: tuple[Tensor, ...]
    updates: tuple[Tensor, ...]
    schedule: ScheduleFn = field(default=create_schedule)
    lane: Var | None = None  # see scan(lanes=...)

    def lower_stmt(self, ins: Sequence[Buffer], outs: Sequence[Buffer]) -> Stmt:
        from kiln.te.lower import create_prim_func

        n = len(self.state_phs)
        f = create_prim_func(self.schedule(list(self.updates)), f"{self.name}_step",
                             inputs=list(self.state_phs) + list(self.input_phs))
        params = [p for p in f.params if isinstance(p, Buffer)]
        t, lane = self.time, self.lane
        # step buffer -> (scan buffer, leading index, lane): states read at t, new states stored at t + 1
        where: dict[Buffer, tuple[Buffer, PrimExpr | None, Var | None]] = {}
        for k in range(n):
            where[params[k]] = (outs[k], t, lane)
            where[params[n + len(self.input_phs) + k]] = (outs[k], t + 1, lane)
        for j in range(len(self.input_phs)):
            where[params[n + j]] = (ins[n + j], None, None)
        body, allocs = _peel_allocs(_rebind(f.body, where))
        stmt = For(t, IntImm(0, t.dtype), self.steps, ForKind.SERIAL, body)
        for buf in reversed(allocs):  # per lane: each thread its own temporaries
            stmt = Allocate(buf, stmt)
        if lane is not None:
            stmt = For(lane, IntImm(0, lane.dtype), ins[0].shape[0], ForKind.PARALLEL, stmt)
        return seq(*(_copy(ins[k], outs[k]) for k in range(n)), stmt)

    def evaluate(self, ins: Sequence[np.ndarray], sizes: dict[Var, int]) -> list[np.ndarray]:
        from kiln.te.eval import Evaluator, evaluate

        n = len(self.state_phs)
        steps = int(Evaluator({}, sizes).scalar(self.steps))
        hist = []
        for k in range(n):
            h = np.empty((steps + 1,) + ins[k].shape, ins[k].dtype)
            h[0] = ins[k]
            hist.append(h)
        feeds = dict(zip(self.input_phs, ins[n:]))
        for lane in range(1 if self.lane is None else ins[0].shape[0]):
            part = slice(None) if self.lane is None else slice(lane, lane + 1)
            env = {} if self.lane is None else {self.lane: lane}
            for t in range(steps):
                feeds.update(zip(self.state_phs, (h[t][part] for h in hist)))
                new = evaluate(list(self.updates), feeds, {**sizes, **env, self.time: t})
                for h, v in zip(hist, new):
                    h[t + 1][part] = v
        return hist


def scan(init: Sequence[Tensor], step: StepFn, steps: Any, inputs: Sequence[Tensor] = (),
         schedule: ScheduleFn = create_schedule, name: str = "scan", lanes: bool = False) -> tuple[Tensor, ...]:
    """Histories of the states `init` under `step`: out[k] has shape (steps + 1, *init[k].shape),
    out[k][0] = init[k], out[k][t + 1] = step(t, *states at t, *inputs)[k].

    `step` receives the time Var and placeholders standing for the states and for `inputs` (it
    must read outer tensors only through those) and returns the new states (same shapes and
    dtypes). `schedule` schedules the step graph (it gets the new-state tensors).

    `lanes`: the states' leading axis holds independent recurrences (the directions of a
    bidirectional RNN). Each lane runs its whole time loop on its own thread (a parallel loop
    around the serial one: no synchronization per step); `step` then gets (t, lane, ...) and
    states with a leading axis of 1, that lane's."""
    steps = const(steps)
    time = Var(f"{name}_t")
    lane = Var(f"{name}_lane") if lanes else None
    state_phs = tuple(placeholder((1, *s.shape[1:]) if lanes else s.shape, s.dtype, f"{name}_state{k}")
                      for k, s in enumerate(init))
    input_phs = tuple(placeholder(x.shape, x.dtype, f"{name}_in{k}") for k, x in enumerate(inputs))
    updates = tuple(step(time, lane, *state_phs, *input_phs) if lanes else step(time, *state_phs, *input_phs))
    if len(updates) != len(init):
        raise ValueError(f"{name}: the step returned {len(updates)} states for {len(init)} initial ones")
    fixed = []
    for k, (u, s) in enumerate(zip(updates, state_phs)):
        if u.dtype != s.dtype or len(u.shape) != len(s.shape) or any(a != b for a, b in zip(u.shape, s.shape)):
            raise ValueError(f"{name}: new state {k} is {u.shape} {u.dtype}, the state is {s.shape} {s.dtype}")
        if isinstance(u.op, PlaceholderOp) or u.op.num_outputs != 1:  # every new state needs its own store
            u = compute(u.shape, lambda *i, u=u: u(*i), name=f"{name}_new{k}")
        fixed.append(u)
    op = ScanOp(name, tuple(init) + tuple(inputs), tuple((canon(steps + 1),) + tuple(s.shape) for s in init),
                tuple(s.dtype for s in init), "", steps=steps, time=time, state_phs=state_phs,
                input_phs=input_phs, updates=tuple(fixed), schedule=schedule, lane=lane)
    return tuple(op.output(k) for k in range(len(init)))


def _rebind(s: Stmt, where: dict[Buffer, tuple[Buffer, PrimExpr | None, Var | None]]) -> Stmt:
    """Loads and stores of the step's buffers moved to the scan's (a leading time index added, the
    lane added to the state's leading index)."""
    def idx(lead: PrimExpr | None, lane: Var | None, indices: tuple[PrimExpr, ...]) -> tuple[PrimExpr, ...]:
        if lane is not None:
            indices = (indices[0] + lane,) + tuple(indices[1:])
        return indices if lead is None else (lead,) + tuple(indices)

    def fe(e: PrimExpr) -> PrimExpr:
        def f(x: PrimExpr) -> PrimExpr | None:
            if isinstance(x, BufferLoad) and x.buffer in where:
                buf, lead, lane = where[x.buffer]
                return BufferLoad(buf, idx(lead, lane, x.indices))
            return None

        return map_expr(e, f)

    def fs(x: Stmt) -> Stmt | None:
        if isinstance(x, BufferStore) and x.buffer in where:
            buf, lead, lane = where[x.buffer]
            return BufferStore(buf, x.value, idx(lead, lane, x.indices))
        return None

    return map_stmt(s, fe, fs)


def _peel_allocs(s: Stmt) -> tuple[Stmt, list[Buffer]]:
    """The step's root temporaries, to allocate once around the time loop instead of every step."""
    allocs = []
    while isinstance(s, Allocate):
        allocs.append(s.buffer)
        s = s.body
    return s, allocs


def _copy(src: Buffer, hist: Buffer) -> Stmt:
    """hist[0, ...] = src[...]: contiguous innermost loop, vectorizable."""
    loops = [Var(f"{src.name}_i{k}") for k in range(len(src.shape))]
    stmt: Stmt = BufferStore(hist, BufferLoad(src, tuple(loops)), (IntImm(0),) + tuple(loops))
    for k in reversed(range(len(loops))):
        kind = ForKind.VECTORIZED if k == len(loops) - 1 else ForKind.SERIAL
        stmt = For(loops[k], IntImm(0, loops[k].dtype), src.shape[k], kind, stmt)
    return stmt
