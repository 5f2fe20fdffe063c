"""Op-to-device mapping by rule: which calls of a model run on the accelerator, with which vector-unit
epilogue fused behind them, and which stay on the CPU.

The accelerator runs 2-d convolutions (one group, or depthwise; no dilation), dense layers (linalg.gemm against a
constant weight) and max/average/global average pooling on float32 tensors of static shape. Behind a convolution or
dense layer it absorbs a chain of single-user elementwise calls: multiplication or addition by a
per-channel or scalar constant, addition of another tensor of the output's shape (a residual), relu,
and clip by constants. Everything else is a CPU step. A fused step is placed where its last call
sits in post order, so every operand it reads (a residual from another branch too) exists by then.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kiln.ir.expr import Call, Constant, Expr, Function, TupleGetItem, children
from kiln.ir.types import TensorType
from kiln.ir.visitor import post_order

ACCELERATED = ("nn.conv", "linalg.gemm", "nn.max_pool", "nn.average_pool", "nn.global_average_pool")


@dataclass
class Step:
    """One unit of work: `calls` (the anchor first, then its fused epilogue; a max pool's is the
    TupleGetItem of its values, its unused indices never computed) on `device`."""

    device: str  # "npu" or "cpu"
    calls: list[Any]
    epilogue: list[tuple[str, Expr | float]] = field(default_factory=list)  # (op, operand) behind the anchor
    hidden: list[Call] = field(default_factory=list)  # calls only this step read, and it reads past them: never run

    @property
    def anchor(self) -> Call:
        return self.calls[0]

    @property
    def result(self) -> Expr:
        return self.calls[-1]


# A rule run before the float ones: the steps it claims from the calls (post order) and their users.
Claim = Callable[[list[Call], dict[int, list[Expr]]], list[Step]]


def place(fn: Function, claim: Claim | None = None) -> list[Step]:
    """The steps of `fn`'s body in an order that computes each value before its first use; `claim` (the
    int8 rule, int8_placement.py) takes its groups first."""
    nodes = post_order(fn.body)
    order = [e for e in nodes if isinstance(e, Call)]
    users = _users(fn.body)
    claimed = claim(order, users) if claim else []
    fused: dict[int, Step] = {id(s.result): s for s in claimed}
    absorbed: set[int] = {id(c) for s in claimed for c in (*s.calls, *s.hidden)}
    for call in order:
        if id(call) in absorbed or not _runs_on_npu(call, users):
            continue
        step = Step("npu", [call])
        if call.op.name == "nn.max_pool":
            step.calls.append(users[id(call)][0])
        elif call.op.name in ("nn.conv", "linalg.gemm"):  # pooling has no accumulators to fuse into
            _absorb_epilogue(step, users, absorbed)
        absorbed.update(id(c) for c in step.calls)
        fused[id(step.result)] = step
    steps = []
    for e in nodes:
        if id(e) in fused:
            steps.append(fused[id(e)])
        elif isinstance(e, Call) and id(e) not in absorbed:
            steps.append(Step("cpu", [e]))
    return steps


def _users(body: Expr) -> dict[int, list[Expr]]:
    """Each expression's users; the function's result counts one more (it must stay visible)."""
    users: dict[int, list[Expr]] = {}
    for e in post_order(body):
        for a in children(e):
            users.setdefault(id(a), []).append(e)
    users.setdefault(id(body), []).append(body)
    return users


def _static_float(t: object) -> bool:
    return isinstance(t, TensorType) and t.is_static and t.dtype == "float32"


def _runs_on_npu(call: Call, users: dict[int, list[Expr]]) -> bool:
    """The rule table: whether the accelerator runs `call` (see the module doc)."""
    name = getattr(call.op, "name", None)
    out = call.type
    if name == "nn.max_pool":  # (values, indices): only when nothing reads the indices
        readers = users.get(id(call), [])
        if len(readers) != 1 or not isinstance(readers[0], TupleGetItem) or readers[0].index != 0:
            return False
        out = call.type.fields[0]
    if name not in ACCELERATED or not _static_float(out) or not all(
            _static_float(a.type) for a in call.args if not (isinstance(a, tuple) and not a)):
        return False
    attrs = call.attrs
    if name == "nn.global_average_pool":
        return len(call.type.shape) == 4
    if name == "nn.conv":
        strides = attrs.strides or (1, 1)
        channels = call.args[0].type.shape[1]
        depthwise = attrs.group == channels == call.type.shape[1]
        return (len(call.type.shape) == 4 and len(set(strides)) == 1 and attrs.group in (1, depthwise and channels)
                and attrs.auto_pad == "NOTSET"
                and not any(d != 1 for d in attrs.dilations or ()) and isinstance(call.args[1], Constant))
    if name == "linalg.gemm":
        return (attrs.alpha == 1.0 and attrs.beta == 1.0 and attrs.transA == 0 and len(call.args) >= 2
                and isinstance(call.args[1], Constant) and all(isinstance(a, Constant) for a in call.args[2:])
                and (len(call.args) < 3 or call.args[2].data.ndim <= 1))
    strides = attrs.strides or (1, 1)
    return (len(out.shape) == 4 and len(set(strides)) == 1 and attrs.auto_pad == "NOTSET" and not attrs.ceil_mode
            and not any(d != 1 for d in getattr(attrs, "dilations", None) or ())
            and (name == "nn.max_pool" or getattr(attrs, "count_include_pad", 0) or not any(attrs.pads or ())))


def _absorb_epilogue(step: Step, users: dict[int, list[Expr]], absorbed: set[int]) -> None:
    """Grow `step` by the chain of elementwise calls it can run on the vector unit that no earlier step took
    (a residual add is the epilogue of whichever of its two convolutions comes first)."""
    channels = step.anchor.type.shape[1]
    while True:
        tail = step.result
        next_users = users.get(id(tail), [])
        if (len(next_users) != 1 or next_users[0] is tail or not isinstance(next_users[0], Call)
                or id(next_users[0]) in absorbed):
            return  # `tail is its own user`: it is the function's result, which stays visible
        user = next_users[0]
        piece = _epilogue_piece(user, tail, channels)
        if piece is None:
            return
        step.calls.append(user)
        step.epilogue.extend(piece)


def _epilogue_piece(user: Call, tail: Expr, channels: int) -> list[tuple[str, Expr | float]] | None:
    """The vector-unit operations `user` is, applied to `tail`; None when it cannot be fused."""
    name = getattr(user.op, "name", None)
    if user.type != tail.type:
        return None
    if name == "nn.relu":
        return [("max", 0.0)]
    if name == "math.clip":
        bounds = user.args[1:]
        if not all(isinstance(b, Constant) and b.data.size == 1 for b in bounds) or len(bounds) != 2:
            return None
        return [("max", float(bounds[0].data.reshape(()))), ("min", float(bounds[1].data.reshape(())))]
    if name not in ("math.add", "math.mul") or len(user.args) != 2:
        return None
    other = user.args[1] if user.args[0] is tail else user.args[0]
    if other is tail:
        return None
    op = "add" if name == "math.add" else "mul"
    if isinstance(other, Constant):
        return _constant_operand(op, other, channels)
    if op == "add" and other.type == tail.type:
        return [("add", other)]
    return None


def _constant_operand(op: str, c: Constant, channels: int) -> list[tuple[str, Expr | float]] | None:
    """A scalar (an immediate) or one value per channel of an NCHW tensor (shape (C, 1, 1) or (1, C, 1, 1))."""
    if c.data.size == 1:
        return [(op, float(c.data.reshape(())))]
    squeezed = [d for d in c.data.shape if d != 1]
    per_channel = squeezed == [channels] and c.data.shape[-2:] in ((1, 1),) and c.data.ndim >= 3
    return [(op, c)] if per_channel and np.issubdtype(c.data.dtype, np.floating) else None


def summary(steps: Sequence[Step]) -> Counter:
    """How many steps run on each device."""
    return Counter(s.device for s in steps)
