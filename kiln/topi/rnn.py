"""te computes of nn.rnn, nn.gru and nn.lstm, and of their recurrence-only forms nn.*_recurrence: one
kernel whose serial loop over time runs the cell.

The input projection X·W^T of every step does not depend on the state. With constant weights
split-rnn-projection (kiln/transform/rnn_projection.py) makes it a packed GEMM of its own and the
recurrence op reads its result, XP, directly at each direction's time index; otherwise (the full op) it
is one reduction over (direction, step, batch, gate) before the loop. The recurrence is a `te.scan`
(kiln/te/scan.py) over the hidden states: its step is a te graph (the state's gate product h·R^T in
register tiles, then the gate activations fused into the new-state computes) that lowers to loop nests
inside the time loop. A bidirectional op runs each direction as a scan lane: its own time loop, the two
in parallel, no synchronization per step. Directions read the projection at `t` forward and `len - 1 - t`
in reverse (rows past their sequence_lens keep their state). Y, Y_h and Y_c are then gathers from the
state histories.

Everything computes in float32 (float64 for float64 inputs) and casts the outputs back, as the
reference (kiln/op/rnn.py) does.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kiln import te, tir
from kiln.op.rnn import bound_activations
from kiln.target import Target
from kiln.te.scan import scan
from kiln.te.schedule import Schedule, Stage, create_schedule
from kiln.te.tensor import Tensor
from kiln.topi.registry import ComputeError, out_dims, register_compute, tensor_type
from kiln.topi.schedule_anchor import block, data_size, inline_injective, is_reduction, parallel_outer
from kiln.topi.schedule_dense import default_mr, panel_width
from kiln.topi.schedule_generic import loop_nest
from kiln.topi.vmath import vsigmoid, vtanh

# a team per step only when h·R^T has at least this many multiply-adds (R^T of 1 MB: more than one
# core's L2 holds, so two cores' L2s share it); below, the fork and join cost more than they save, and on
# a loaded machine a team that waits for a descheduled thread each step ran 20x slower (audio LSTM)
PARALLEL_STEP_MIN_MACS = 1 << 18
K_SPLIT = 4  # at most this many interleaved partial sums of k fill a small batch's register tile (gates)
KEEP = "rnn_keep"  # tag of a step compute to materialize (read by a reduction: never recompute per use)
Act = Callable[[tir.PrimExpr], tir.PrimExpr]


def _activation(key: str, a: float, b: float) -> Act:
    """The tir form of one of kiln.op.rnn.ACTIVATIONS with its alpha/beta bound."""
    forms: dict[str, Act] = {
        "relu": lambda x: tir.max_(x, 0.0),
        "tanh": vtanh,  # float32: branch-free, so the gate loops vectorize (kiln.topi.vmath)
        "sigmoid": vsigmoid,
        "affine": lambda x: x * a + b,
        "leakyrelu": lambda x: tir.select(x >= 0.0, x, x * a),
        "thresholdedrelu": lambda x: tir.select(x > a, x, tir.const(0.0, x.dtype)),
        "scaledtanh": lambda x: vtanh(x * b) * a,
        "hardsigmoid": lambda x: tir.min_(tir.max_(x * a + b, 0.0), 1.0),
        "elu": lambda x: tir.select(x >= 0.0, x, te.expm1(tir.min_(x, 0.0)) * a),
        "softsign": lambda x: x / (te.fabs(x) + 1.0),
        "softplus": lambda x: tir.max_(x, 0.0) + te.log1p(te.exp(-te.fabs(x))),
    }
    return forms[key]


def _activations(op: str, attrs, per_dir: int, nd: int) -> list[list[tuple[str, float, float]]]:
    """Per direction, (name, alpha, beta) of each cell function, consumed as the reference does."""
    try:
        return bound_activations(attrs, per_dir, nd)
    except ValueError as err:
        raise ComputeError(f"{op}: {err}") from None


@dataclass
class _Cell:
    """What a cell's step needs besides its tensors: sizes, the compute dtype and the attributes."""

    attrs: object
    nd: int
    hidden: int
    gh: int  # gate rows per direction
    batch: tir.PrimExpr
    ct: str
    acts: list[list[tuple[str, float, float]]]
    has_lens: bool
    lane: tir.Var | None = None  # the direction when each runs its own time loop (scan lanes)

    def dir(self, d: tir.PrimExpr) -> tir.PrimExpr:
        """The direction of the step's local direction index d (its only one, 0, in a lane)."""
        return d if self.lane is None else d + self.lane

    def act(self, k: int, d: tir.PrimExpr, x: tir.PrimExpr) -> tir.PrimExpr:
        """Cell function k of direction d applied to x (a select when the directions differ)."""
        outs = [_activation(*self.acts[i][k])(x) for i in range(self.nd)]
        if self.nd == 1 or self.acts[0][k] == self.acts[1][k]:
            return outs[0]
        return tir.select(tir.eq(self.dir(d), 0), outs[0], outs[1])

    def clip(self, x: tir.PrimExpr) -> tir.PrimExpr:
        c = self.attrs.clip
        return x if c is None else tir.min_(tir.max_(x, -float(c)), float(c))

    def shape(self, n: int | None = None) -> tuple:
        return (1 if self.lane is not None else self.nd, self.batch, self.hidden if n is None else n)

    @staticmethod
    def rt_at(rt: Tensor, d, k, g) -> tir.PrimExpr:
        """R^T[d, k, g], from (direction, hidden, gates) or panels (direction, gates / nr, hidden, nr)."""
        if len(rt.shape) == 3:
            return rt(d, k, g)
        nr = rt.shape[3].value
        return rt(d, g // nr, k, g % nr)

    def gates(self, h: Tensor, rt: Tensor, lo: int, n: int) -> Tensor:
        """h·R^T for gate rows [lo, lo + n) of every direction: the step's matmul.

        A register tile like the dense kernel's (rows unrolled, two vectors of gates) over the whole k:
        its rows are batch rows (each R^T panel is then read once for all of them), and at small batch
        k is also split into `ku` interleaved partial sums, added where the gates are read. At batch 1
        one accumulator per gate vector is a serial FMA chain over k, and gcc kept a long run of them in
        memory (a store and reload per k): on the audio LSTM (hidden 128, Zen4) the tile is 2x faster (4
        partials; 8 were slower), and 8 batch rows instead of 4 took a batch-8 LSTM from 21 to 15 ms."""
        batch = self.batch.value if isinstance(self.batch, tir.IntImm) else 1
        mr = default_mr(Target.current())  # NOTE: a compute: the target of the lowering in progress
        rows = min(batch, mr)  # the dense kernel's tile height: 8 with AVX-512's 32 registers, else 6
        ku = next(u for u in range(min(K_SPLIT, mr // rows), 0, -1) if self.hidden % u == 0)

        def f(d, b, u, g):
            k = te.reduce_axis(self.hidden // ku, "k")
            return te.sum(h(d, b, k * ku + u) * self.rt_at(rt, self.dir(d), k * ku + u, g + lo), axis=k)

        attrs = {"rows": rows}
        if len(rt.shape) == 4 and lo % rt.shape[3].value == 0:
            attrs["panel"] = rt.shape[3].value
        part = te.compute(self.shape(n)[:2] + (ku, n), f, name="rnn_hr", attrs=attrs)

        def total(d, b, g):
            out = part(d, b, 0, g)
            for u in range(1, ku):
                out = out + part(d, b, u, g)
            return out

        return te.compute(self.shape(n), total, name="rnn_hr_sum")


class _Step:
    """The step's view of its inputs: projection and recurrent bias, validity of a row at step t.

    ins["xp"] is either the kernel's own projection (direction, step, batch, gate) in each direction's
    time order, without bias, next to ins["bias"] (ONNX's B); or (`ordered` False) a recurrence op's XP
    input in X's layout, bias included, next to its optional ins["rb"]."""

    def __init__(self, cell: _Cell, t: tir.Var, ins: dict[str, Tensor], ordered: bool, order=None):
        self.cell, self.t, self.ins, self.ordered, self.order = cell, t, ins, ordered, order

    def _zero(self) -> tir.PrimExpr:
        return tir.const(0.0, self.cell.ct)

    def proj(self, d, b, g) -> tir.PrimExpr:
        """x_t·W^T + Wb for gate row g."""
        d = self.cell.dir(d)
        if not self.ordered:
            t = self.order(d, self.t, b, self.ins.get("lens"))
            return self.ins["xp"](*((b, t) if self.cell.attrs.layout else (t, b)), d * self.cell.gh + g)
        wb = self.ins["bias"](d, g) if "bias" in self.ins else self._zero()
        return self.ins["xp"](d, self.t, b, g) + wb

    def rb(self, d, g) -> tir.PrimExpr:
        d = self.cell.dir(d)
        if not self.ordered:
            return self.ins["rb"](d, g) if "rb" in self.ins else self._zero()
        return self.ins["bias"](d, g + self.cell.gh) if "bias" in self.ins else self._zero()

    def pre(self, d, b, g) -> tir.PrimExpr:
        """x_t·W^T + Wb + Rb for gate row g."""
        return self.proj(d, b, g) + self.rb(d, g)

    def keep(self, b, new: tir.PrimExpr, old: tir.PrimExpr) -> tir.PrimExpr:
        """Rows past their sequence length keep their state."""
        if not self.cell.has_lens:
            return new
        return tir.select(self.t < self.ins["lens"](b), new, old)


def _rnn_step(c: _Cell, s: _Step, h: Tensor) -> list[Tensor]:
    hr = c.gates(h, s.ins["rt"], 0, c.hidden)
    return [te.compute(c.shape(), lambda d, b, j: s.keep(b, c.act(0, d, c.clip(s.pre(d, b, j) + hr(d, b, j))),
                                                        h(d, b, j)), name="rnn_h")]


def _gru_step(c: _Cell, s: _Step, h: Tensor) -> list[Tensor]:
    H, rt, lbr = c.hidden, s.ins["rt"], c.attrs.linear_before_reset
    hr = c.gates(h, rt, 0, 3 * H if lbr else 2 * H)

    def gate(k, d, b, j):  # z (k=0) or r (k=1)
        return c.act(0, d, c.clip(s.pre(d, b, j + k * H) + hr(d, b, j + k * H)))

    if lbr:
        def cand(d, b, j):
            rec = hr(d, b, j + 2 * H) + s.rb(d, j + 2 * H)
            return s.proj(d, b, j + 2 * H) + gate(1, d, b, j) * rec
    else:
        rh = te.compute(c.shape(), lambda d, b, k: gate(1, d, b, k) * h(d, b, k), name="rnn_rh", tag=KEEP)
        hh = c.gates(rh, rt, 2 * H, H)

        def cand(d, b, j):
            return s.pre(d, b, j + 2 * H) + hh(d, b, j)

    def new(d, b, j):
        z, old = gate(0, d, b, j), h(d, b, j)
        return s.keep(b, (1.0 - z) * c.act(1, d, c.clip(cand(d, b, j))) + z * old, old)

    return [te.compute(c.shape(), new, name="rnn_h")]


def _lstm_step(c: _Cell, s: _Step, h: Tensor, cs: Tensor) -> list[Tensor]:
    H = c.hidden
    hr = c.gates(h, s.ins["rt"], 0, 4 * H)

    def peep(k, d, j, cell_value):
        return s.ins["p"](c.dir(d), j + k * H) * cell_value if "p" in s.ins else tir.const(0.0, c.ct)

    def gate(k, d, b, j):  # pre-activation of gate i (0), o (1), f (2), c (3)
        return s.pre(d, b, j + k * H) + hr(d, b, j + k * H)

    def cell(d, b, j):
        old = cs(d, b, j)
        i = c.act(0, d, c.clip(gate(0, d, b, j) + peep(0, d, j, old)))
        f = 1.0 - i if c.attrs.input_forget else c.act(0, d, c.clip(gate(2, d, b, j) + peep(2, d, j, old)))
        return s.keep(b, f * old + i * c.act(1, d, c.clip(gate(3, d, b, j))), old)

    c_new = te.compute(c.shape(), cell, name="rnn_c")

    def hidden(d, b, j):
        cn = c_new(d, b, j)
        o = c.act(0, d, c.clip(gate(1, d, b, j) + peep(1, d, j, cn)))
        return s.keep(b, o * c.act(2, d, cn), h(d, b, j))

    return [te.compute(c.shape(), hidden, name="rnn_h"), c_new]


def _gate_nest(s: Schedule, st: Stage, parallel: bool, target: Target) -> None:
    """h·R^T's partial sums as parallel (direction, gate block, batch row) tasks; each accumulates a
    (partial x gate block) register tile over k (k outside, partials unrolled, gates vectorized, two
    vectors wide as the dense kernel's panels) and stores it once."""
    acc = s[s.cache_write(st.op.output(0), "local")]
    d, b, u, g = st.op.axis
    attrs = dict(st.op.attrs)
    nr = attrs.get("panel")  # R^T in panels: one task per panel
    go, gi = st.split(g, nr or block(g.dom.extent, panel_width(st.op.output(0).dtype, target)))
    static_batch = isinstance(b.dom.extent, tir.IntImm)
    bo, bi = st.split(b, block(b.dom.extent, attrs.get("rows", 1)) if static_batch else 1)
    st.reorder(d, go, bo, bi, u, gi)
    # a symbolic batch stays a serial loop inside: fused, the accumulator's region could not be bounded
    tasks = [d, go, bo] if static_batch else [d, go]
    macs = data_size(acc, reduce_too=True)
    at = parallel_outer(st, tasks, macs if parallel and (macs is None or macs >= PARALLEL_STEP_MIN_MACS) else 0)
    st.vectorize(gi)
    acc.compute_at(st, at if static_batch else bi)
    ad, ab, au, ag = acc.op.axis
    acc.reorder(ad, *acc.op.reduce_axis, ab, au, ag)
    acc.unroll(ab)
    acc.unroll(au)
    acc.vectorize(ag)


def schedule_step(outputs: Sequence[Tensor], parallel: bool = True) -> Schedule:
    """A step's loop nests: gate products vectorized along the gate axis (parallel when large and
    `parallel`: not in a scan lane, already one thread's), activations inlined into the new-state computes."""
    # NOTE: the scan schedules its step from inside the compute, which no target reaches as an argument
    target = Target.current()
    s = create_schedule(outputs)
    for st in inline_injective(s, outputs, keep=lambda st: getattr(st.op, "tag", "") == KEEP):
        if is_reduction(st):
            _gate_nest(s, st, parallel, target)
        else:
            loop_nest(st, target)
    return s


def _cast_to(x: Tensor, dtype: str, name: str) -> Tensor:
    if x.dtype == dtype:
        return x
    return te.compute(x.shape, lambda *i: tir.cast(dtype, x(*i)), name=name)


def _static(e: tir.PrimExpr, op: str, what: str) -> int:
    if not isinstance(e, tir.IntImm):
        raise ComputeError(f"{op}: {what} must be known at compile time, got {e}")
    return e.value


def _time_order(direction: str, steps: tir.PrimExpr) -> Callable[..., tir.PrimExpr]:
    """order(d, t, b, lens): the time index direction d works on at its step t; in reverse `len - 1 - t`
    for the row's valid steps (an involution on them), so the same map also scatters Y back."""
    def order(d, t, b, lens: Tensor | None):
        back = steps - 1 - t if lens is None else tir.select(t < lens(b), lens(b) - 1 - t, t)
        if direction == "forward":
            return t
        return back if direction == "reverse" else tir.select(tir.eq(d, 1), back, t)

    return order


def _scan_inputs(x: Tensor, w: Tensor, r: Tensor, layout: int, ct: str, order, lens) -> dict[str, Tensor]:
    """The input projection X·W^T of every step (time index already in each direction's order) and R^T."""
    nd, gh, inp = w.shape
    wt = te.compute((nd, inp, gh), lambda d, k, g: tir.cast(ct, w(d, g, k)), name="rnn_wt")
    steps, batch = (x.shape[1], x.shape[0]) if layout else (x.shape[0], x.shape[1])

    def xp(d, t, b, g):
        k = te.reduce_axis(inp, "k")
        row = (b, order(d, t, b, lens), k) if layout else (order(d, t, b, lens), b, k)
        return te.sum(tir.cast(ct, x(*row)) * wt(d, k, g), axis=k)

    return {"xp": te.compute((nd, steps, batch, gh), xp, name="rnn_xp"),
            "rt": te.compute((nd, r.shape[2], gh), lambda d, k, g: tir.cast(ct, r(d, g, k)), name="rnn_rt"),
            # NOTE: the step never reads W^T; as a scan input it stays materialized (schedules do not inline
            # what an extern reads), so the projection runs vectorized along the contiguous gate axis.
            "wt": wt}


def _initial(v: Tensor | None, state: tuple, layout: int, ct: str, k: int) -> Tensor:
    """An initial state as (direction, batch, hidden) in the compute dtype; zeros when omitted."""
    if v is None:
        return te.compute(state, lambda d, b, j: tir.const(0.0, ct), name=f"rnn_init{k}")
    if layout:
        return te.compute(state, lambda d, b, j: tir.cast(ct, v(b, d, j)), name=f"rnn_init{k}")
    return _cast_to(v, ct, f"rnn_init{k}")


def _outputs(hists, out_type, x: Tensor, layout: int, order, lens: Tensor | None) -> tuple[Tensor, ...]:
    """Y gathered from the hidden-state history (zeros past a row's length), then each final state."""
    dtype, steps = tensor_type(out_type, 0).dtype, x.shape[1] if layout else x.shape[0]

    def y(s, d, b, j):
        v = tir.cast(dtype, hists[0](order(d, s, b, lens) + 1, d, b, j))
        return v if lens is None else tir.select(s < lens(b), v, tir.const(0, dtype))

    outs = [te.compute(out_dims(out_type, [x], 0), (lambda b, s, d, j: y(s, d, b, j)) if layout else y,
                       name="rnn_y")]
    for k, hist in enumerate(hists):
        def final(d, b, j, hist=hist):
            return tir.cast(dtype, hist(steps, d, b, j))

        outs.append(te.compute(out_dims(out_type, [x], k + 1), (lambda b, d, j, f=final: f(d, b, j))
                               if layout else final, name=f"rnn_final{k}"))
    return tuple(outs)


def _recurrent(op: str, gates: int, per_dir: int, n_states: int, step, split: bool = False) -> Callable:
    """The compute of `op`: the full op (X, W, R, B, ...) or, `split`, its recurrence (XP, RT, RB, ...)."""
    def compute(attrs, inputs, out_type, consts):
        if split:
            xp, rt, rb, lens, *rest = inputs
            x = xp
            nd = _static(rt.shape[0], op, "the direction count")
            hidden = _static(rt.shape[-2 if len(rt.shape) == 4 else 1], op, "hidden_size")
        else:
            x, w, r, bias, lens, *rest = inputs
            nd, hidden = _static(w.shape[0], op, "the direction count"), _static(r.shape[2], op, "hidden_size")
        inits, peep = rest[:n_states], (rest[n_states] if len(rest) > n_states else None)
        ct = "float64" if x.dtype == "float64" else "float32"
        steps, batch = (x.shape[1], x.shape[0]) if attrs.layout else (x.shape[0], x.shape[1])
        acts = _activations(op, attrs, per_dir, nd)
        cell = _Cell(attrs, nd, hidden, gates * hidden, batch, ct, acts, lens is not None)
        clamped = None if lens is None else te.compute(
            (batch,), lambda b: tir.min_(tir.max_(tir.cast("int64", lens(b)), 0), steps), name="rnn_lens")
        order = _time_order(attrs.direction, steps)
        if split:
            ins = {"xp": _cast_to(xp, ct, "rnn_xp"), "rt": _cast_to(rt, ct, "rnn_rt")}
            if rb is not None:
                ins["rb"] = _cast_to(rb, ct, "rnn_rb")
        else:
            ins = _scan_inputs(x, w, r, attrs.layout, ct, order, clamped)
            if bias is not None:
                ins["bias"] = _cast_to(bias, ct, "rnn_bias")
        if clamped is not None:
            ins["lens"] = clamped
        if peep is not None:
            ins["p"] = _cast_to(peep, ct, "rnn_p")
        names = list(ins)

        lanes = nd > 1  # the directions are independent recurrences: one thread's time loop each

        def stepfn(t, *phs):
            if lanes:
                cell.lane, phs = phs[0], phs[1:]
            step_ins = dict(zip(names, phs[n_states:]))
            return step(cell, _Step(cell, t, step_ins, not split, order), *phs[:n_states])

        init = [_initial(v, (nd, batch, hidden), attrs.layout, ct, k) for k, v in enumerate(inits)]
        sched = functools.partial(schedule_step, parallel=not lanes)
        hists = scan(init, stepfn, steps, list(ins.values()), schedule=sched, name=op.replace(".", "_"), lanes=lanes)
        return _outputs(hists, out_type, x, attrs.layout, order, clamped)

    return compute


register_compute("nn.rnn")(_recurrent("nn.rnn", 1, 1, 1, _rnn_step))
register_compute("nn.gru")(_recurrent("nn.gru", 3, 2, 1, _gru_step))
register_compute("nn.lstm")(_recurrent("nn.lstm", 4, 3, 2, _lstm_step))
register_compute("nn.rnn_recurrence")(_recurrent("nn.rnn_recurrence", 1, 1, 1, _rnn_step, split=True))
register_compute("nn.gru_recurrence")(_recurrent("nn.gru_recurrence", 3, 2, 1, _gru_step, split=True))
register_compute("nn.lstm_recurrence")(_recurrent("nn.lstm_recurrence", 4, 3, 2, _lstm_step, split=True))
