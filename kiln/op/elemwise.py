"""Elementwise and broadcasting arithmetic (examples of the registry's style; the family grows here)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kiln.ir import dtype as dt
from kiln.ir.types import TensorType
from kiln.op.registry import BROADCAST, ELEMWISE, define_op
from kiln.op.typerel import broadcast_rel, check_dtype, same_as_input, tensor


def _numeric_broadcast(attrs, types, values):
    out = broadcast_rel(attrs, types, values)
    check_dtype(out, dt.NUMERIC)
    return out


add = define_op("math.add", pattern=BROADCAST, inputs=2, infer=_numeric_broadcast,
                ref=lambda a, x, y: np.add(x, y).astype(x.dtype, copy=False),
                doc="x + y with numpy broadcasting (integers wrap).")

relu = define_op("nn.relu", pattern=ELEMWISE, infer=same_as_input,
                 ref=lambda a, x: np.maximum(x, x.dtype.type(0)))


@dataclass(frozen=True)
class CastAttrs:
    to: str
    saturate: int = 1
    round_mode: str = "up"


def _cast_rel(attrs, types, values):
    return TensorType(tensor(types[0]).shape, attrs.to)


def _cast_ref(attrs, x):
    return x.astype(dt.to_numpy(attrs.to))


cast = define_op("math.cast", pattern=ELEMWISE, attrs=CastAttrs, infer=_cast_rel, ref=_cast_ref,
                 doc="Convert elements to dtype `to`.")
