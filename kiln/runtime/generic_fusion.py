"""Chains the generic tier runs as one kernel call: conv / Gemm / MatMul, then what its store can do.

A conv may be followed by an inference batch norm of constants (folded into its weights once, kept in
the executor's cache), then by up to two adds (a constant vector along the output channels or columns
becomes a bias, a tensor of the output's shape the residual), then by a ReLU or Clip (the clamp). Every
call of a chain but its last must have that one consumer, so its value is never needed on its own. Found
once per executor, by one walk over the imported graph: no pass, no copy of the graph. At run time a chain
whose values do not fit (another dtype, a residual that broadcasts) runs call by call instead.
"""

from __future__ import annotations

import ctypes
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from kiln.ir.expr import Call, Constant, Expr, Op, children
from kiln.ir.visitor import post_order
from kiln.runtime.generic_ops import ANCHORS, GENERIC_OPS, Tail, batch_norm_affine, clamp_bounds, constant_derived


@dataclass(frozen=True)
class Chain:
    anchor: Call
    norm: Call | None  # a batch norm after a conv, folded into its weights
    adds: tuple[Call, ...]
    clamp: Call | None

    @cached_property
    def calls(self) -> tuple[Call, ...]:
        """Its calls in order: each reads the one before."""
        return (self.anchor, *((self.norm,) if self.norm else ()), *self.adds, *((self.clamp,) if self.clamp else ()))

    @cached_property
    def inputs(self) -> tuple[Expr, ...]:
        """What its calls read from outside it."""
        inside = {id(c) for c in self.calls}
        return tuple(a for c in self.calls for a in c.args if id(a) not in inside)


def _is_op(e: Expr, *names: str) -> bool:
    return isinstance(e, Call) and isinstance(e.op, Op) and e.op.name in names


def find_chains(root: Expr) -> dict[int, Chain]:
    """The chains of the graph under `root`, by the id of their last call."""
    consumers: dict[int, list[Expr]] = defaultdict(list)
    for e in post_order(root):
        for c in children(e):
            consumers[id(c)].append(e)
    consumers[id(root)].append(root)

    def only(e: Expr, *names: str) -> Call | None:
        """e's one consumer, where it is a call of one of `names`."""
        users = consumers[id(e)]
        return users[0] if len(users) == 1 and _is_op(users[0], *names) and users[0] is not e else None

    chains: dict[int, Chain] = {}
    for e in post_order(root):
        if not _is_op(e, *ANCHORS):
            continue
        last: Call = e
        norm = only(e, "nn.batch_normalization") if e.op.name == "nn.conv" else None
        if norm is not None and norm.args[0] is e and all(isinstance(a, Constant) for a in norm.args[1:]):
            last = norm
        else:
            norm = None
        adds: list[Call] = []
        while len(adds) < 2 and (nxt := only(last, "math.add")) is not None and nxt.args[0] is not nxt.args[1]:
            adds.append(last := nxt)
        clamp = only(last, "nn.relu", "math.clip")
        if clamp is not None and clamp.args[0] is last and all(isinstance(a, Constant) for a in clamp.args[1:]):
            last = clamp
        else:
            clamp = None
        if last is not e:
            chains[id(last)] = Chain(e, norm, tuple(adds), clamp)
    return chains


def _channel_vector(value: Any, rank: int, axis: int, count: int) -> np.ndarray | None:
    """A float32 constant that adds one value per output channel (axis `axis` of `count` in a result of
    `rank`) as a vector of `count`, or None where it is not one (it would broadcast the result)."""
    if not isinstance(value, np.ndarray) or value.dtype != np.float32 or value.ndim > rank:
        return None
    shape = (1,) * (rank - value.ndim) + value.shape
    if any(d != 1 for i, d in enumerate(shape) if i != axis) or shape[axis] not in (1, count):
        return None
    return np.broadcast_to(value.reshape(-1), (count,))


def _out_channels(anchor: Call, args: list[Any]) -> tuple[int, int, int] | None:
    """(rank, channel axis, channels) of the anchor's result on these arguments."""
    a, b = args[0], args[1]
    if not all(isinstance(v, np.ndarray) and v.ndim >= 2 for v in (a, b)):
        return None
    if anchor.op.name == "nn.conv":
        return a.ndim, 1, b.shape[0]
    if anchor.op.name == "linalg.gemm":
        return 2, 1, b.shape[0] if anchor.attrs.transB else b.shape[1]
    rank = max(a.ndim, b.ndim)
    return rank, rank - 1, b.shape[-1]


def _folded(chain: Chain, args: list[Any], values: Callable[[Expr], Any], cache: dict) -> list[Any] | None:
    """The conv's arguments with the chain's batch norm folded into weight and bias (once per executor:
    both are constants), or None where it cannot be."""
    conv, norm = chain.anchor, chain.norm
    if not all(isinstance(a, Constant) for a in conv.args[1:]) or args[1].dtype != np.float32:
        return None

    def fold() -> tuple[np.ndarray, np.ndarray] | None:
        affine = batch_norm_affine(norm, [None] + [values(a) for a in norm.args[1:]])
        if affine is None:
            return None
        inv, shift = affine
        w = args[1].astype(np.float64) * inv.reshape((-1,) + (1,) * (args[1].ndim - 1))
        b = (0.0 if len(args) < 3 or args[2] is None else args[2].astype(np.float64)) * inv + shift
        return w.astype(np.float32), b.astype(np.float32)

    folded = constant_derived(cache, (id(conv), "folded"), fold)
    return None if folded is None else [args[0], *folded]


def _tail(chain: Chain, args: list[Any], values: Callable[[Expr], Any]) -> Tail | None:
    """The chain's adds and clamp as the anchor's epilogue, or None where they do not make one."""
    where = _out_channels(chain.anchor, args)
    if where is None:
        return None
    bias, res = [], None
    prev: Expr = chain.norm or chain.anchor
    for add in chain.adds:
        other = add.args[1] if add.args[0] is prev else add.args[0]
        value = values(other)
        vector = _channel_vector(value, *where) if isinstance(other, Constant) else None
        if vector is not None:
            bias.append(vector)
        elif res is None:
            res = value
        else:
            return None
        prev = add
    lo, hi = -math.inf, math.inf
    if chain.clamp is not None:
        bounds = clamp_bounds(chain.clamp, [None] + [values(a) for a in chain.clamp.args[1:]])
        if bounds is None:
            return None
        lo, hi = bounds
    total = None if not bias else np.sum(np.stack(bias), axis=0, dtype=np.float32)
    return Tail(total, res, lo, hi)


def run_fused(lib: ctypes.CDLL, chain: Chain, values: Callable[[Expr], Any], cache: dict) -> Any:
    """The chain's value from one kernel call, or None where its values do not fit one."""
    args = [values(a) for a in chain.anchor.args]
    if chain.norm is not None:
        args = _folded(chain, args, values, cache)
        if args is None:
            return None
    tail = _tail(chain, args, values)
    if tail is None:
        return None
    return GENERIC_OPS[chain.anchor.op.name](lib, chain.anchor, args, cache, tail)
