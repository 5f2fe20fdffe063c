"""te computes of nn.rnn, nn.gru and nn.lstm: one kernel whose serial loop over time runs the cell.

The work splits in two. The input projection X·W^T of every step does not depend on the state, so
it is one ordinary reduction over (direction, step, batch, gate) before the loop: parallel and
vectorizable. The recurrence is a `te.scan` (kiln/te/scan.py) over the hidden states: its step
is a te graph (the state's gate product h·R^T, a reduction vectorized along the gate axis, then the
gate activations fused into the new-state computes) that lowers to loop nests inside the time loop.
Both directions run in the same loop (the direction is an axis of the state), each reading the
projection at its own time index: `t` forward, `len - 1 - t` in reverse (rows past their
sequence_lens keep their state). Y, Y_h and Y_c are then gathers from the state histories.

Everything computes in float32 (float64 for float64 inputs) and casts the outputs back, as the
reference (kiln/op/rnn.py) does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kiln import te, tir
from kiln.op.rnn import bound_activations
from kiln.te.scan import scan
from kiln.topi.vmath import vsigmoid, vtanh
from kiln.te.schedule import Schedule, Stage, create_schedule
from kiln.te.tensor import Tensor
from kiln.topi.registry import ComputeError, out_dims, register_compute, tensor_type
from kiln.topi.schedule_anchor import block, data_size, inline_injective, is_reduction, parallel_outer
from kiln.topi.schedule_generic import _loop_nest

GATE_RUN = 128  # gates accumulated per task of the step's matmul (8 AVX-512 / 16 AVX2 vectors)
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
    batch: tir.PrimExpr
    ct: str
    acts: list[list[tuple[str, float, float]]]
    has_bias: bool
    has_lens: bool

    def act(self, k: int, d: tir.PrimExpr, x: tir.PrimExpr) -> tir.PrimExpr:
        """Cell function k of direction d applied to x (a select when the directions differ)."""
        outs = [_activation(*self.acts[i][k])(x) for i in range(self.nd)]
        if self.nd == 1 or self.acts[0][k] == self.acts[1][k]:
            return outs[0]
        return tir.select(tir.eq(d, 0), outs[0], outs[1])

    def clip(self, x: tir.PrimExpr) -> tir.PrimExpr:
        c = self.attrs.clip
        return x if c is None else tir.min_(tir.max_(x, -float(c)), float(c))

    def shape(self, n: int | None = None) -> tuple:
        return (self.nd, self.batch, self.hidden if n is None else n)

    def gates(self, h: Tensor, rt: Tensor, lo: int, n: int) -> Tensor:
        """h·R^T for gate rows [lo, lo + n) of every direction: the step's matmul."""
        def f(d, b, g):
            k = te.reduce_axis(self.hidden, "k")
            return te.sum(h(d, b, k) * rt(d, k, g + lo), axis=k)

        return te.compute(self.shape(n), f, name="rnn_hr")


class _Step:
    """The step's view of its inputs: projection plus biases, validity of a row at step t."""

    def __init__(self, cell: _Cell, t: tir.Var, ins: dict[str, Tensor]):
        self.cell, self.t, self.ins = cell, t, ins

    def wb(self, d, g) -> tir.PrimExpr:
        return self.ins["bias"](d, g) if self.cell.has_bias else tir.const(0.0, self.cell.ct)

    def rb(self, d, g) -> tir.PrimExpr:
        gh = self.ins["rt"].shape[2]
        return self.ins["bias"](d, g + gh) if self.cell.has_bias else tir.const(0.0, self.cell.ct)

    def pre(self, d, b, g) -> tir.PrimExpr:
        """x_t·W^T + Wb + Rb for gate row g."""
        return self.ins["xp"](d, self.t, b, g) + self.wb(d, g) + self.rb(d, g)

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
            return s.ins["xp"](d, s.t, b, j + 2 * H) + s.wb(d, j + 2 * H) + gate(1, d, b, j) * rec
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
        return s.ins["p"](d, j + k * H) * cell_value if "p" in s.ins else tir.const(0.0, c.ct)

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


def _gate_nest(s: Schedule, st: Stage) -> None:
    """h·R^T as parallel (direction, gate block, batch row) tasks; each accumulates its block over k in a
    small local buffer (enough independent vector chains to hide the FMA latency) and stores it once."""
    acc = s[s.cache_write(st.op.output(0), "local")]
    d, b, g = st.op.axis
    go, gi = st.split(g, block(g.dom.extent, GATE_RUN))
    st.reorder(d, go, b, gi)
    # a symbolic batch stays a serial loop inside: fused, the accumulator's region could not be bounded
    tasks = [d, go, b] if isinstance(b.dom.extent, tir.IntImm) else [d, go]
    at = parallel_outer(st, tasks, data_size(acc, reduce_too=True))
    st.vectorize(gi)
    acc.compute_at(st, at if len(tasks) == 3 else b)
    ad, ab, ag = acc.op.axis
    acc.reorder(ad, ab, *acc.op.reduce_axis, ag)
    acc.vectorize(ag)


def schedule_step(outputs: Sequence[Tensor]) -> Schedule:
    """A step's loop nests: gate products vectorized along the gate axis (parallel when large),
    activations inlined into the new-state computes."""
    s = create_schedule(outputs)
    for st in inline_injective(s, outputs, keep=lambda st: getattr(st.op, "tag", "") == KEEP):
        if is_reduction(st):
            _gate_nest(s, st)
        else:
            _loop_nest(st)
    return s


def _cast_to(x: Tensor, dtype: str, name: str) -> Tensor:
    if x.dtype == dtype:
        return x
    return te.compute(x.shape, lambda *i: tir.cast(dtype, x(*i)), name=name)


def _static(e: tir.PrimExpr, op: str, what: str) -> int:
    if not isinstance(e, tir.IntImm):
        raise ComputeError(f"{op}: {what} must be known at compile time, got {e}")
    return e.value


def _time_order(direction: str, steps: tir.PrimExpr, lens: Tensor | None) -> Callable[..., tir.PrimExpr]:
    """order(d, t, b): the time index direction d works on at its step t; in reverse `len - 1 - t` for
    the row's valid steps (an involution on them), so the same map also scatters Y back."""
    def order(d, t, b):
        back = steps - 1 - t if lens is None else tir.select(t < lens(b), lens(b) - 1 - t, t)
        if direction == "forward":
            return t
        return back if direction == "reverse" else tir.select(tir.eq(d, 1), back, t)

    return order


def _scan_inputs(x: Tensor, w: Tensor, r: Tensor, layout: int, ct: str, order) -> dict[str, Tensor]:
    """The input projection X·W^T of every step (time index already in each direction's order) and R^T."""
    nd, gh, inp = w.shape
    wt = te.compute((nd, inp, gh), lambda d, k, g: tir.cast(ct, w(d, g, k)), name="rnn_wt")
    steps, batch = (x.shape[1], x.shape[0]) if layout else (x.shape[0], x.shape[1])

    def xp(d, t, b, g):
        k = te.reduce_axis(inp, "k")
        row = (b, order(d, t, b), k) if layout else (order(d, t, b), b, k)
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
        v = tir.cast(dtype, hists[0](order(d, s, b) + 1, d, b, j))
        return v if lens is None else tir.select(s < lens(b), v, tir.const(0, dtype))

    outs = [te.compute(out_dims(out_type, [x], 0), (lambda b, s, d, j: y(s, d, b, j)) if layout else y,
                       name="rnn_y")]
    for k, hist in enumerate(hists):
        def final(d, b, j, hist=hist):
            return tir.cast(dtype, hist(steps, d, b, j))

        outs.append(te.compute(out_dims(out_type, [x], k + 1), (lambda b, d, j, f=final: f(d, b, j))
                               if layout else final, name=f"rnn_final{k}"))
    return tuple(outs)


def _recurrent(op: str, per_dir: int, n_states: int, step) -> Callable:
    def compute(attrs, inputs, out_type, consts):
        x, w, r, bias, lens, *rest = inputs
        inits, peep = rest[:n_states], (rest[n_states] if len(rest) > n_states else None)
        ct = "float64" if x.dtype == "float64" else "float32"
        steps, batch = (x.shape[1], x.shape[0]) if attrs.layout else (x.shape[0], x.shape[1])
        nd = _static(w.shape[0], op, "the direction count")
        hidden = _static(r.shape[2], op, "hidden_size")
        cell = _Cell(attrs, nd, hidden, batch, ct, _activations(op, attrs, per_dir, nd), bias is not None,
                     lens is not None)
        clamped = None if lens is None else te.compute(
            (batch,), lambda b: tir.min_(tir.max_(tir.cast("int64", lens(b)), 0), steps), name="rnn_lens")
        order = _time_order(attrs.direction, steps, clamped)
        ins = _scan_inputs(x, w, r, attrs.layout, ct, order)
        if bias is not None:
            ins["bias"] = _cast_to(bias, ct, "rnn_bias")
        if clamped is not None:
            ins["lens"] = clamped
        if peep is not None:
            ins["p"] = _cast_to(peep, ct, "rnn_p")
        names = list(ins)

        def stepfn(t, *phs):
            return step(cell, _Step(cell, t, dict(zip(names, phs[n_states:]))), *phs[:n_states])

        init = [_initial(v, (nd, batch, hidden), attrs.layout, ct, k) for k, v in enumerate(inits)]
        hists = scan(init, stepfn, steps, list(ins.values()), schedule=schedule_step, name=op.replace(".", "_"))
        return _outputs(hists, out_type, x, attrs.layout, order, clamped)

    return compute


register_compute("nn.rnn")(_recurrent("nn.rnn", 1, 1, _rnn_step))
register_compute("nn.gru")(_recurrent("nn.gru", 2, 1, _gru_step))
register_compute("nn.lstm")(_recurrent("nn.lstm", 3, 2, _lstm_step))
