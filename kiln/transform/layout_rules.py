"""Local rewrites of layout_transform calls: fold them into constants, drop identities, cancel
inverse pairs, merge chains and absorb adjacent transposes (TRANSFORM_RULES), plus `transform`,
the constructor the layout passes build every transform with, so none is born redundant.
"""

from __future__ import annotations

import numpy as np

from kiln.ir.expr import Constant, Expr
from kiln.ir.types import TensorType
from kiln.op.layout import LayoutTransformAttrs, convert_array, layout_transform, parse_layout, primal_dims
from kiln.transform.pattern import Match, Rule, is_constant, is_op, wildcard

LT = "tensor.layout_transform"


def _attrs(e: Expr) -> LayoutTransformAttrs:
    return e.attrs  # type: ignore[attr-defined]


def transform(x: Expr, src: str, dst: str, sizes: tuple[int, ...] = ()) -> Expr:
    """layout_transform(x, src -> dst), simplified on the spot (constants fold, pairs cancel)."""
    e = layout_transform(x, src_layout=src, dst_layout=dst, sizes=sizes)
    for _ in range(4):
        rep = simplify_once(e)
        if rep is None:
            return e
        e = rep
    return e


def simplify_once(e: Expr) -> Expr | None:
    """The first TRANSFORM_RULES rewrite that applies at `e` itself, or None."""
    for rule in TRANSFORM_RULES:
        caps = rule.pattern.match(e, {})
        if caps is not None:
            rep = rule.rewrite(Match(e, caps))
            if rep is not None and rep is not e:
                return rep
    return None


def _pads_nothing(t: TensorType, src: str, dst: str) -> bool:
    """True when moving a tensor of type `t` from `src` to `dst` adds no padding."""
    s, d = parse_layout(src), parse_layout(dst)
    if t.shape is None:
        return d.is_permutation
    dims = primal_dims(s, t.shape)
    for p in d.primals:
        f = d.block(p)
        if f > 1 and not (isinstance(dims[p], int) and dims[p] % f == 0):
            return False
    return True


def fold_constant_transform(m: Match) -> Expr | None:
    a = _attrs(m.root)
    return Constant(np.ascontiguousarray(convert_array(m["x"].data, a.src_layout, a.dst_layout, a.sizes)))


def drop_identity_transform(m: Match) -> Expr | None:
    a = _attrs(m.root)
    return m["x"] if a.src_layout == a.dst_layout and not a.sizes else None


def cancel_transform_pair(m: Match) -> Expr | None:
    """A -> B -> A is the input itself when the shapes agree and every blocked axis is static
    (padding, if any, was cropped off again)."""
    inner, outer = _attrs(m["inner"]), _attrs(m.root)
    x = m["x"]
    if (outer.src_layout, outer.dst_layout) != (inner.dst_layout, inner.src_layout):
        return None
    if not isinstance(x.type, TensorType) or x.type != m.root.type or x.type.shape is None:
        return None
    a, b = parse_layout(inner.src_layout), parse_layout(inner.dst_layout)
    for p in b.primals:
        if (a.block(p) or b.block(p)) and not isinstance(x.type.shape[a.index(p)], int):
            return None
    return x


def merge_transform_chain(m: Match) -> Expr | None:
    """A -> B -> C is A -> C when the first step pads nothing and crops nothing."""
    inner, outer = _attrs(m["inner"]), _attrs(m.root)
    x = m["x"]
    if outer.src_layout != inner.dst_layout or inner.sizes or not isinstance(x.type, TensorType):
        return None
    if not _pads_nothing(x.type, inner.src_layout, inner.dst_layout):
        return None
    src = parse_layout(inner.src_layout)
    dst = parse_layout(outer.dst_layout)
    if any(n and not src.block(p) for p, n in zip(dst.primals, outer.sizes)):
        return None
    return transform(x, inner.src_layout, outer.dst_layout, outer.sizes)


def _permuted(layout: str, perm: tuple[int, ...]) -> str | None:
    lay = parse_layout(layout)
    if not lay.is_permutation or len(perm) != lay.rank:
        return None
    return "".join(lay.axes[i][0] for i in perm)


def absorb_transpose_before(m: Match) -> Expr | None:
    """transpose then transform: the transform reads the transpose's input in a permuted layout."""
    t, a = m["t"], _attrs(m.root)
    lay = parse_layout(a.src_layout)
    perm = t.attrs.perm if t.attrs.perm is not None else tuple(reversed(range(lay.rank)))
    if not lay.is_permutation or len(perm) != lay.rank:
        return None
    src = ["?"] * lay.rank
    for i, p in enumerate(perm):
        src[p] = lay.axes[i][0]
    return transform(m["x"], "".join(src), a.dst_layout, a.sizes)


def absorb_transpose_after(m: Match) -> Expr | None:
    """transform then transpose: one transform to the permuted destination layout."""
    inner, t = _attrs(m["inner"]), m.root
    lay = parse_layout(inner.dst_layout)
    perm = t.attrs.perm if t.attrs.perm is not None else tuple(reversed(range(lay.rank)))
    dst = _permuted(inner.dst_layout, tuple(perm))
    if dst is None:
        return None
    sizes = inner.sizes
    if sizes:
        by_letter = dict(zip(lay.primals, sizes))
        sizes = tuple(by_letter[p] for p in dst)
    return transform(m["x"], inner.src_layout, dst, sizes)


_x = wildcard().named("x")
_inner = is_op(LT)(_x).named("inner")

TRANSFORM_RULES: list[Rule] = [
    Rule("fold-constant-transform", is_op(LT)(is_constant().named("x")), fold_constant_transform),
    Rule("drop-identity-transform", is_op(LT)(_x), drop_identity_transform),
    Rule("cancel-transform-pair", is_op(LT)(_inner), cancel_transform_pair),
    Rule("merge-transform-chain", is_op(LT)(_inner), merge_transform_chain),
    Rule("absorb-transpose-before", is_op(LT)(is_op("tensor.transpose")(_x).named("t")), absorb_transpose_before),
    Rule("absorb-transpose-after", is_op("tensor.transpose")(_inner), absorb_transpose_after),
]
