"""AttentionHeads: nn.attention reads its heads where a transformer keeps them and writes only what is read.

An exporter splits heads with reshape (B, S, H * D) -> (B, S, H, D) and transpose (0, 2, 1, 3), and
merges the output back the same way: two copies of every Q, K, V and Y. nn.attention's packed 3-D
form (q_num_heads/kv_num_heads) reads and writes (B, S, H * D) directly, so when Q, K and V are all
such splits the attention takes the 3-D tensors, and a merge of its output becomes the 3-D output
itself (any other reader of the 4-D output gets it split back). Trailing outputs nobody reads
(present_key, present_value, the scores) are trimmed by the op's `outputs` attribute: no kernel
writes them.

PyTorch's nn.MultiheadAttention (sequence first, (S, B, E)) splits a batch of one as reshape (S, H, D),
transpose (1, 0, 2), reshape (1, H, S, D), scales Q and K by positive constants (K between two
transposes of its last axes), and merges Y by transpose (2, 0, 1, 3) and reshape (S, [1,] H * Dv): the
same bytes as (1, S, H * D), so these become the packed form too, the constants folding into the scale.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from kiln.ir.expr import Call, Constant, Expr, Function, Op, TupleGetItem, children
from kiln.ir.module import IRModule
from kiln.ir.types import TensorType
from kiln.ir.visitor import post_order, rewrite
from kiln.op.registry import get_op
from kiln.transform.infra import PassContext, function_pass

SWAP = (0, 2, 1, 3)  # (B, S, H, D) <-> (B, H, S, D)


def _is(e: Expr, name: str) -> bool:
    return isinstance(e, Call) and isinstance(e.op, Op) and e.op.name == name


def _static(e: Expr) -> tuple[int, ...] | None:
    t = e.type
    if isinstance(t, TensorType) and t.shape is not None and all(isinstance(d, int) for d in t.shape):
        return tuple(t.shape)  # type: ignore[arg-type]
    return None


def _swap(e: Expr) -> bool:
    return _is(e, "tensor.transpose") and e.attrs.perm is not None and tuple(e.attrs.perm) == SWAP


def _packed(x4: Expr) -> Expr | None:
    """X when x4 is transpose(reshape(X, (B, S, H, D)), (0, 2, 1, 3)) with X of static shape (B, S, H * D),
    or a (1, S, H * D) reshape of X when x4 is the sequence-first split of a batch of one (_seq_first)."""
    seq_first = _seq_first(x4)
    if seq_first is not None:
        return seq_first
    if not _swap(x4) or not _is(x4.args[0], "tensor.reshape"):
        return None
    x = x4.args[0].args[0]
    split, packed = _static(x4.args[0]), _static(x)
    if split is None or packed is None or len(packed) != 3 or len(split) != 4:
        return None
    return x if split[:2] == packed[:2] and split[2] * split[3] == packed[2] else None


def _seq_first(x4: Expr) -> Expr | None:
    """reshape(X, (1, S, H * D)) when x4 is reshape(transpose(reshape(X, (S, H, D)), (1, 0, 2)), (1, H, S, D))
    and X holds S x H * D elements in that order ((S, 1, H * D) or (S, H * D))."""
    if not (_is(x4, "tensor.reshape") and _is(x4.args[0], "tensor.transpose")):
        return None
    t = x4.args[0]
    if t.attrs.perm is None or tuple(t.attrs.perm) != (1, 0, 2) or not _is(t.args[0], "tensor.reshape"):
        return None
    x = t.args[0].args[0]
    split, shape, packed = _static(x4), _static(t.args[0]), _static(x)
    if split is None or shape is None or packed is None or len(split) != 4 or split[0] != 1:
        return None
    s, h, d = shape
    if split[1:] != (h, s, d) or packed not in ((s, 1, h * d), (s, h * d)):
        return None
    return get_op("tensor.reshape")(x, _shape_const((1, s, h * d)))


def _positive_scalar(e: Expr) -> float | None:
    if isinstance(e, Constant) and e.data.size == 1 and np.issubdtype(e.data.dtype, np.floating):
        v = float(e.data.reshape(()))
        return v if v > 0 and np.isfinite(v) else None
    return None


LAST_TWO = (0, 1, 3, 2)


def _scaled(x4: Expr) -> tuple[Expr, float]:
    """(x, c) when x4 is x * c, or transpose(transpose(x, last two) * c, last two), with c a positive
    scalar constant; else (x4, 1)."""
    e, back = x4, False
    if _is(e, "tensor.transpose") and e.attrs.perm is not None and tuple(e.attrs.perm) == LAST_TWO:
        e, back = e.args[0], True
    if _is(e, "math.mul") and len(e.args) == 2:
        c = _positive_scalar(e.args[1])
        x = e.args[0]
        if back:
            if not (_is(x, "tensor.transpose") and x.attrs.perm is not None and tuple(x.attrs.perm) == LAST_TWO):
                return x4, 1.0
            x = x.args[0]
        if c is not None:
            return x, c
    return x4, 1.0


def _unscaled_qkv(args: tuple[Expr, ...]) -> tuple[list[Expr], float]:
    """Q, K, V without positive scalar factors on Q and K, and the product of those factors."""
    q, cq = _scaled(args[0])
    k, ck = _scaled(args[1])
    return [q, k, args[2]], cq * ck


def _merged(e: Expr, y4: Expr) -> bool:
    """Whether e is reshape(transpose(y4, (0, 2, 1, 3)), (B, S, H * Dv))."""
    if not _is(e, "tensor.reshape") or not _swap(e.args[0]) or e.args[0].args[0] is not y4:
        return False
    shape, y = _static(e), _static(y4)
    return shape is not None and y is not None and shape == (y[0], y[2], y[1] * y[3])


def _merged_seq_first(e: Expr, y4: Expr) -> bool:
    """Whether e is reshape(transpose(y4, (2, 0, 1, 3)), (S, [1,] H * Dv)) with y4 of a batch of one."""
    perm = e.args[0].attrs.perm
    shape, y = _static(e), _static(y4)
    if perm is None or tuple(perm) != (2, 0, 1, 3) or shape is None or y is None or y[0] != 1:
        return False
    return shape in ((y[2], y[1] * y[3]), (y[2], 1, y[1] * y[3]))


def _shape_const(dims: tuple[int, ...]) -> Constant:
    return Constant(np.asarray(dims, np.int64))


def _consumers(root: Expr) -> dict[int, list[Expr]]:
    users: dict[int, list[Expr]] = {}
    for e in post_order(root):
        for c in children(e):
            users.setdefault(id(c), []).append(e)
    return users


def _plan(call: Call, users: dict[int, list[Expr]]) -> tuple[int, list[Expr] | None] | None:
    """(outputs to keep, the 3-D Q/K/V or None) for an attention call, None when nothing changes."""
    uses = users.get(id(call), [])
    if any(not isinstance(u, TupleGetItem) for u in uses):
        return None
    keep = max((u.index for u in uses), default=0) + 1
    a = call.attrs
    packed = None
    if len(call.args) <= 4 and _static(call.args[0]) is not None and len(_static(call.args[0])) == 4:
        qkv = [_packed(x) for x in _unscaled_qkv(call.args)[0]]
        if all(x is not None for x in qkv):
            packed = qkv
    if packed is None and keep >= a.outputs:
        return None
    return keep, packed


@function_pass("attention-heads", opt_level=2)
def attention_heads(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
    """nn.attention over exporter-split heads reads and writes the packed (B, S, H * D) tensors; outputs
    nobody reads are not produced."""
    users = _consumers(fn)  # the function itself reads its body: an attention returned whole keeps all outputs
    plans: dict[int, tuple[int, list[Expr] | None]] = {}
    for e in post_order(fn.body):
        if _is(e, "nn.attention"):
            p = _plan(e, users)
            if p is not None:
                plans[id(e)] = p
    if not plans:
        return fn
    items: dict[int, Expr] = {}  # id(old item 0 of a packed attention) -> its 3-D replacement

    def post(old: Expr, new: Expr) -> Expr:
        if id(old) in plans and isinstance(new, Call):
            keep, packed = plans[id(old)]  # NOTE: rewrite rebuilds nodes alike, so new.args mirror old.args
            attrs = dataclasses.replace(new.attrs, outputs=keep)
            args = list(new.args)
            if packed is not None:
                q4, k4 = _static(old.args[0]), _static(old.args[1])
                attrs = dataclasses.replace(attrs, q_num_heads=q4[1], kv_num_heads=k4[1])
                qkv, c = _unscaled_qkv(new.args)
                if c != 1.0:
                    base = attrs.scale if attrs.scale is not None else 1 / float(np.sqrt(q4[3]))
                    attrs = dataclasses.replace(attrs, scale=base * c)
                args[:3] = [_packed(x4) for x4 in qkv]  # X of the rebuilt splits
            return get_op("nn.attention")(*args, attrs=attrs)
        if isinstance(old, TupleGetItem) and id(old.tuple_value) in plans:
            item = TupleGetItem(new.tuple_value, old.index)
            if old.index != 0 or plans[id(old.tuple_value)][1] is None:
                return item
            y4 = _static(old)
            items[id(old)] = item
            split = get_op("tensor.reshape")(item, _shape_const((y4[0], y4[2], y4[1], y4[3])))
            return get_op("tensor.transpose")(split, perm=SWAP)
        if _is(old, "tensor.reshape") and _swap(old.args[0]) and id(old.args[0].args[0]) in items \
                and _merged(old, old.args[0].args[0]):
            return items[id(old.args[0].args[0])]
        if _is(old, "tensor.reshape") and _is(old.args[0], "tensor.transpose") and id(old.args[0].args[0]) in items \
                and _merged_seq_first(old, old.args[0].args[0]):
            return get_op("tensor.reshape")(items[id(old.args[0].args[0])], _shape_const(_static(old)))
        return new

    return rewrite(fn, post)
