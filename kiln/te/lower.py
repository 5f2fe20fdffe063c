"""Lowering a scheduled te graph to one tir PrimFunc.

Every non-inlined stage becomes a loop nest over its leaf IterVars that stores into its Buffer;
a reduction becomes an init store plus an update nest. Root stages run one after another in
dataflow order; a compute_at stage runs at the start of its consumer's loop body, over the region
that body reads (bound inference, kiln.te.region), in a "local" buffer indexed from the region's
start. Loops that overshoot a non-dividing split are guarded by conditions around the stores.
"""

from __future__ import annotations

from collections.abc import Sequence

from kiln.te import region
from kiln.te.bound import canon
from kiln.te.schedule import Schedule, Stage, create_schedule, reads
from kiln.te.tensor import ComputeOp, ExternOp, IterVar, PlaceholderOp, Tensor
from kiln.tir.expr import And, BufferLoad, Call, IntImm, PrimExpr, ProducerLoad, Reduce, Var
from kiln.tir.functor import map_expr, substitute, walk
from kiln.tir.stmt import (
    Allocate,
    Buffer,
    BufferStore,
    Evaluate,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    PrimFunc,
    Stmt,
    seq,
)


def create_prim_func(outputs: Tensor | Sequence[Tensor] | Schedule, name: str = "main",
                     inputs: Sequence[Tensor] | None = None) -> PrimFunc:
    """Lower `outputs` (with their schedule, or the default one) to a PrimFunc whose params are
    the input Buffers, the output Buffers, then the symbolic dims (Vars) of the shapes.
    `inputs` fixes the input order (and may name computed tensors, which are then not computed)."""
    sched = outputs if isinstance(outputs, Schedule) else create_schedule(outputs)
    return _Lowering(sched, inputs).run(name)


def _and(conds: Sequence[PrimExpr]) -> PrimExpr | None:
    out = None
    for c in conds:
        out = c if out is None else And(out, c)
    return out


def _guard(conds: Sequence[PrimExpr], body: Stmt) -> Stmt:
    c = _and(conds)
    return body if c is None else IfThenElse(c, body)


class _Lowering:
    def __init__(self, sched: Schedule, inputs: Sequence[Tensor] | None):
        self.sched = sched
        self.given_inputs = list(inputs) if inputs is not None else None
        self.input_ops = {t.op for t in inputs} if inputs is not None else set()
        self.placeholders: list[Tensor] = []
        self.order: list[Stage] = []
        self.bodies: dict[Stage, tuple[PrimExpr, ...]] = {}
        self.buffers: dict[tuple[object, int], Buffer] = {}
        self.names: set[str] = set()

    def key(self, t: Tensor) -> tuple[object, int]:
        return self.sched.stage_map.get(t.op, t.op), t.value_index

    # ---- graph ------------------------------------------------------------------------------
    def _visit(self, t: Tensor, seen: set) -> None:
        op = t.op
        if op in self.input_ops or isinstance(op, PlaceholderOp):
            if self.given_inputs is not None and op not in self.input_ops:
                raise ValueError(f"{op.name} is read but is not among the given inputs")
            if op not in seen:
                seen.add(op)
                self.placeholders.append(t)
            return
        st = self.sched[op]
        if st in seen:
            return
        seen.add(st)
        for r in reads(st.op):
            self._visit(r, seen)
        self.order.append(st)

    def _inline(self) -> None:
        """Substitute inlined stages' bodies into their readers (producers first)."""
        def f(x: PrimExpr) -> PrimExpr | None:
            if isinstance(x, ProducerLoad) and x.producer.op not in self.input_ops:
                st = self.sched.stage_map.get(x.producer.op)
                if st is not None and st.attach_type == "inline":
                    axis = st.op.axis
                    return substitute(self.bodies[st][0], {iv.var: i for iv, i in zip(axis, x.indices)})
            return None

        for st in self.order:
            if isinstance(st.op, ComputeOp):
                self.bodies[st] = tuple(map_expr(b, f) for b in st.op.body)

    def _check(self, outputs: set[Stage]) -> None:
        for st in self.order:
            if st.attach_type == "inline" and st in outputs:
                raise ValueError(f"{st.op.name} is an output and cannot be inlined")
            if st.attach_type == "scope" and st in outputs:
                raise ValueError(f"{st.op.name} is an output and cannot be computed at another stage")
            if isinstance(st.op, ExternOp):
                for t in st.op.inputs:
                    src = self.sched.stage_map.get(t.op)
                    if src is not None and src.attach_type != "root" and t.op not in self.input_ops:
                        raise ValueError(f"extern {st.op.name} reads {t.name}, which must be computed at the root")

    # ---- buffers ----------------------------------------------------------------------------
    def _buffer(self, t: Tensor, shape: Sequence[PrimExpr], scope: str = "global") -> Buffer:
        name, k = t.name, 1
        while name in self.names:
            name, k = f"{t.name}_{k}", k + 1
        self.names.add(name)
        buf = Buffer(name, tuple(shape), t.dtype, scope=scope)
        self.buffers[self.key(t)] = buf
        return buf

    def _stage_buffers(self, st: Stage) -> list[Buffer]:
        """Buffers for the outputs of `st` that are not function outputs (allocated in the body)."""
        out = []
        for k in range(st.op.num_outputs):
            t = st.op.output(k)
            if self.key(t) in self.buffers:
                continue
            if st.attach_type == "scope":
                shape = [self.ranges[st][iv].extent for iv in st.op.axis]
                out.append(self._buffer(t, shape, st.scope or "local"))
            else:
                out.append(self._buffer(t, t.shape))
        return out

    # ---- expressions ------------------------------------------------------------------------
    def load(self, t: Tensor, indices: Sequence[PrimExpr]) -> BufferLoad:
        st = self.sched.stage_map.get(t.op)
        offset = self.offsets.get(st) if t.op not in self.input_ops else None
        if offset is not None:
            indices = [i - o for i, o in zip(indices, offset)]
        return BufferLoad(self.buffers[self.key(t)], tuple(canon(i) for i in indices))

    def lower_expr(self, e: PrimExpr, vmap: dict[Var, PrimExpr]) -> PrimExpr:
        def f(x: PrimExpr) -> PrimExpr | None:
            if isinstance(x, Var):
                return vmap.get(x)
            if isinstance(x, ProducerLoad):
                return self.load(x.producer, x.indices)
            return None

        return map_expr(e, f)

    # ---- statements -------------------------------------------------------------------------
    def _loop(self, st: Stage, iv: IterVar, body: Stmt) -> Stmt:
        hint = (("unroll_hint", True),) if iv in st.unroll_hints else ()
        return For(iv.var, IntImm(0, iv.var.dtype), self.ext[st][iv], st.kinds.get(iv, ForKind.SERIAL), body, hint)

    def _with_attached(self, iv: IterVar, body: Stmt) -> Stmt:
        inner = self.attached.get(iv, [])
        if not inner:
            return body
        stmt = seq(*(self.stage_stmt(p) for p in inner), body)
        for p in reversed(inner):
            for buf in reversed(self.allocs[p]):
                stmt = Allocate(buf, stmt)
        return stmt

    def _stores(self, st: Stage, values: Sequence[PrimExpr], idx: tuple[PrimExpr, ...]) -> Stmt:
        bufs = [self.buffers[self.key(st.op.output(k))] for k in range(len(values))]
        if len(values) == 1:
            return BufferStore(bufs[0], values[0], idx)
        # tuple reducers: every new value is computed from the old ones before any is stored
        lets = [Var(f"{b.name}_v", b.dtype) for b in bufs]
        stmt: Stmt = seq(*(BufferStore(b, v, idx) for b, v in zip(bufs, lets)))
        for v, val in reversed(list(zip(lets, values))):
            stmt = LetStmt(v, val, stmt)
        return stmt

    def _reduction(self, st: Stage, vmap, idx, data_conds, all_conds) -> tuple[Stmt, Stmt]:
        """(update, init) stores of a reduction stage, each under its guards."""
        op, red = st.op, self.bodies[st][0]
        src = [self.lower_expr(s, vmap) for s in red.source]
        old = [BufferLoad(self.buffers[self.key(op.output(k))], idx) for k in range(op.num_outputs)]
        update = self._stores(st, red.combiner.combine(*old, *src), idx)
        if red.condition is not None:
            update = IfThenElse(self.lower_expr(red.condition, vmap), update)
        identity = red.combiner.identity(*(s.dtype for s in red.source))
        return _guard(all_conds, update), _guard(data_conds, self._stores(st, identity, idx))

    def stage_stmt(self, st: Stage) -> Stmt:
        op = st.op
        if isinstance(op, ExternOp):
            ins = [self.buffers[self.key(t)] for t in op.inputs]
            outs = [self.buffers[self.key(op.output(k))] for k in range(op.num_outputs)]
            body = op.lower_stmt(ins, outs)
            return body if body is not None else Evaluate(Call("int32", op.func, (*ins, *outs, *op.scalars)))
        vals, rng = self.vals[st], self.ranges[st]
        vmap = {iv.var: canon(rng[iv].min + vals[iv]) for iv in st.root_iter_vars}
        idx = tuple(vals[iv] for iv in op.axis)
        data_conds = [c for c, kind in self.conds[st] if kind == "data"] + self.guards.get(st, [])
        all_conds = [c for c, kind in self.conds[st] if kind == "reduce"] + data_conds
        body = self.bodies[st]
        leaves = st.leaf_iter_vars
        if isinstance(body[0], Reduce):
            main, init = self._reduction(st, vmap, idx, data_conds, all_conds)
            r0 = next(k for k, iv in enumerate(leaves + [None]) if iv is None or iv.kind == "reduce")
            # the init nest gets its own loop variables: a Var is bound by one loop only
            data = [iv for iv in leaves[r0:] if iv.kind == "data"]
            fresh = {iv.var: Var(f"{iv.var.name}_init", iv.var.dtype) for iv in data}
            init = substitute(init, fresh)
            for iv in reversed(data):
                loop = self._loop(st, iv, init)
                init = For(fresh[iv.var], loop.min, loop.extent, loop.kind, loop.body)
        else:
            if any(isinstance(x, Reduce) for b in body for x in walk(b)):
                raise ValueError(f"{op.name}: a reduction must be the whole body of a compute")
            main = _guard(data_conds, self._stores(st, [self.lower_expr(b, vmap) for b in body], idx))
            init, r0 = None, len(leaves)
        stmt = main
        for iv in reversed(leaves[r0:]):
            stmt = self._loop(st, iv, self._with_attached(iv, stmt))
        if init is not None:
            stmt = seq(init, stmt)
        for iv in reversed(leaves[:r0]):
            stmt = self._loop(st, iv, self._with_attached(iv, stmt))
        return stmt

    # ---- driver -----------------------------------------------------------------------------
    def run(self, name: str) -> PrimFunc:
        seen: set = set()
        for t in self.given_inputs or []:
            self._visit(t, seen)
        for t in self.sched.outputs:
            self._visit(t, seen)
        outputs = {self.sched[t] for t in self.sched.outputs}
        self._check(outputs)
        self._inline()
        live = [st for st in self.order if st.attach_type != "inline" and st.op not in self.input_ops]
        self.ranges, self.ext, self.vals, self.conds, self.guards = region.infer(self.sched, live, self.bodies)
        self.offsets = {st: tuple(self.ranges[st][iv].min for iv in st.op.axis)
                        for st in live if st.attach_type == "scope"}
        self.attached: dict[IterVar, list[Stage]] = {}
        for st in live:
            if st.attach_type == "scope":
                self.attached.setdefault(st.attach_ivar, []).append(st)
        params: list[Buffer | Var] = [self._buffer(t, t.shape) for t in self.placeholders]
        params += [self._buffer(t, t.shape) for t in self.sched.outputs]
        self.allocs = {st: self._stage_buffers(st) for st in live}
        roots = [st for st in live if st.attach_type == "root"]
        body = seq(*(self.stage_stmt(st) for st in roots))
        for buf in reversed([b for st in roots for b in self.allocs[st]]):
            body = Allocate(buf, body)
        return PrimFunc(name, tuple(params) + tuple(_symbolic_vars(params, live)), body)


def _symbolic_vars(params: Sequence[Buffer], stages: Sequence[Stage]) -> list[Var]:
    """Vars in shapes, root domains and extern scalars, in first-appearance order."""
    exprs = [d for b in params for d in b.shape]
    for st in stages:
        if isinstance(st.op, ExternOp):
            exprs += [d for s in st.op.out_shapes for d in s] + list(st.op.scalars)
        exprs += [e for iv in st.root_iter_vars for e in (iv.dom.min, iv.dom.extent)]
    out: list[Var] = []
    for e in exprs:
        for x in walk(e):
            if isinstance(x, Var) and x not in out:
                out.append(x)
    return out

