"""Computes of the Winograd transforms (kiln/op/winograd.py) in the blocked layout.

Each transformed value is a constant-coefficient sum written out at build time with its zero terms
left out (gcc cannot drop x * 0.0 under IEEE rules) and ones not multiplied; the tile position is
chosen by a Select chain on the index, which the simplifier decides once the schedule unrolls a tile.
Separable form (knobs winograd.separable_input/_output): a root stage holds the row sums (d B of every
padded row, M A of every tile), so each is computed once. NOTE: gcc does not share identical sums across
the unrolled statements itself (the stores may alias the loads): the one-stage form costs alpha^2 terms.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kiln import te, tir
from kiln.op.winograd import KERNEL, tiles, winograd_matrices
from kiln.tir import PrimExpr, select
from kiln.topi.knobs import knob
from kiln.topi.layout import pad_blocked
from kiln.topi.registry import ComputeError, register_compute


def _static_dims(name: str, x: te.Tensor, axes: tuple[int, ...]) -> tuple[int, ...]:
    """The sizes of x's `axes` (the batch may be symbolic, these may not)."""
    dims = [x.shape[a] for a in axes]
    if not all(isinstance(d, tir.IntImm) for d in dims):
        raise ComputeError(f"{name}: needs static channel and spatial dims, got {x.shape}")
    return tuple(d.value for d in dims)


def _combine(coefs: np.ndarray, terms: list[Callable[[], PrimExpr]], dtype: str) -> PrimExpr:
    """sum_k coefs[k] * terms[k]() over the nonzero coefficients (1 and -1 without a multiply)."""
    nonzero = [(float(c), t) for c, t in zip(coefs, terms) if c != 0]
    nonzero.sort(key=lambda ct: ct[0] < 0)  # a positive term first: 0 - x is not -x under IEEE (signed zeros)
    out: PrimExpr | None = None
    for c, term in nonzero:
        t = term()
        if out is None:
            out = t if c == 1.0 else t * tir.const(c, dtype)  # x * -1.0 is folded to -x
        else:
            t = t if abs(c) == 1.0 else t * tir.const(abs(c), dtype)
            out = out + t if c > 0 else out - t
    return out if out is not None else tir.const(0, dtype)


def _tile_value(left: np.ndarray, right: np.ndarray, load: Callable[[int, int], PrimExpr], dtype: str) -> PrimExpr:
    """sum_r left[r] * (sum_s right[s] * load(r, s))."""
    rows = [lambda r=r: _combine(right, [lambda s=s, r=r: load(r, s) for s in range(len(right))], dtype)
            for r in range(len(left))]
    return _combine(left, rows, dtype)


def _by_position(index: PrimExpr, values: list[PrimExpr]) -> PrimExpr:
    """values[index] as a Select chain (decided once the index is a constant)."""
    out = values[-1]
    for k in range(len(values) - 2, -1, -1):
        out = select(tir.eq(index, k), values[k], out)
    return out


@register_compute("nn.winograd_input")
def _winograd_input(attrs, inputs, out_type, consts):
    x = inputs[0]
    n, c = x.shape[0], x.shape[4]
    cbs, hs, ws = _static_dims("nn.winograd_input", x, (1, 2, 3))
    m = attrs.tile
    alpha = m + KERNEL - 1
    pt, pl, _, _ = attrs.pads
    th, tw = tiles(attrs.out, m)
    hp, wp = (th - 1) * m + alpha, (tw - 1) * m + alpha
    if hp < hs + pt or wp < ws + pl:
        raise ComputeError(f"nn.winograd_input: tiles of {attrs.out} do not cover X {x.shape}")
    xp = pad_blocked(x, ((pt, hp - hs - pt), (pl, wp - ws - pl)), tir.const(0, x.dtype), name="winograd_pad")
    _, _, bt = winograd_matrices(m)

    if not knob("winograd.separable_input", (False, True), True):
        def whole(i, q, t, u, k):
            def load(r, s):
                return xp(i, q % cbs, t * m + r, u * m + s, k)

            values = [_tile_value(bt[a], bt[b], load, x.dtype) for a in range(alpha) for b in range(alpha)]
            return _by_position(q // cbs, values)

        return te.compute((n, alpha * alpha * cbs, th, tw, c), whole, name="winograd_input",
                          attrs={"tile": m, "blocks": cbs})

    def rows(i, blk, y, u, j, k):  # every padded row times B, per tile column: (d B)[y][u, j], shared by 2 tiles
        values = [_combine(bt[b], [lambda s=s: xp(i, blk, y, u * m + s, k) for s in range(alpha)], x.dtype)
                  for b in range(alpha)]
        return _by_position(j, values)

    db = te.compute((n, cbs, hp, tw, alpha, c), rows, name="winograd_rows", attrs={"tile": m})

    def f(i, q, t, u, k):
        blk, ij = q % cbs, q // cbs
        values = [_combine(bt[a], [lambda r=r, b=b: db(i, blk, t * m + r, u, b, k) for r in range(alpha)], x.dtype)
                  for a in range(alpha) for b in range(alpha)]
        return _by_position(ij, values)

    return te.compute((n, alpha * alpha * cbs, th, tw, c), f, name="winograd_input",
                      attrs={"tile": m, "blocks": cbs})


@register_compute("nn.winograd_output")
def _winograd_output(attrs, inputs, out_type, consts):
    y = inputs[0]
    b = inputs[1] if len(inputs) > 1 else None
    n, k = y.shape[0], y.shape[4]
    m = attrs.tile
    alpha = m + KERNEL - 1
    kb = _static_dims("nn.winograd_output", y, (1,))[0] // (alpha * alpha)
    at, _, _ = winograd_matrices(m)

    if not knob("winograd.separable_output", (False, True), False):
        def whole(i, o, oy, ox, kc):
            def load(r, s):
                return y(i, (r * alpha + s) * kb + o, oy // m, ox // m, kc)

            values = [_tile_value(at[a], at[c], load, y.dtype) for a in range(m) for c in range(m)]
            v = _by_position((oy % m) * m + ox % m, values)
            return v + b(o, kc) if b is not None else v

        return te.compute((n, kb, attrs.out[0], attrs.out[1], k), whole, name="winograd_output",
                          attrs={"tile": m, "blocks": kb})

    def cols(i, o, t, u, r, x, kc):  # (M A)[r][x] of every tile
        values = [_combine(at[c], [lambda s=s: y(i, (r * alpha + s) * kb + o, t, u, kc) for s in range(alpha)],
                           y.dtype) for c in range(m)]
        return _by_position(x, values)

    ma = te.compute((n, kb, y.shape[2], y.shape[3], alpha, m, k), cols, name="winograd_cols", attrs={"tile": m})

    def f(i, o, oy, ox, kc):
        t, u, x = oy // m, ox // m, ox % m
        values = [_combine(at[a], [lambda r=r: ma(i, o, t, u, r, x, kc) for r in range(alpha)], y.dtype)
                  for a in range(m)]
        v = _by_position(oy % m, values)
        return v + b(o, kc) if b is not None else v

    return te.compute((n, kb, attrs.out[0], attrs.out[1], k), f, name="winograd_output",
                      attrs={"tile": m, "blocks": kb})
