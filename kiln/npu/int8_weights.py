"""The integer weights behind a QDQ model's float constants.

Constant folding turns DequantizeLinear(int8 W, scale) into the float weights the interpreter multiplies
by. Before the passes run, `Int8Weights.collect` records each such constant's int8 values and scales,
keyed by the exact float array folding produces; placement finds a convolution's or dense layer's int8
weights by looking its float constant up. A float weight some pass changed finds nothing and stays float.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from kiln.ir.expr import Call, Constant
from kiln.ir.module import IRModule
from kiln.ir.visitor import post_order
from kiln.op.interpreter import run_op
from kiln.op.quant import expand_param


@dataclass(frozen=True)
class Int8Weight:
    """Symmetric int8 weights (zero point 0) and their scale broadcast to the weights' shape."""

    values: np.ndarray
    scale: np.ndarray


def _key(data: np.ndarray) -> tuple[tuple[int, ...], str, str]:
    return data.shape, str(data.dtype), hashlib.sha256(np.ascontiguousarray(data).tobytes()).hexdigest()


@dataclass
class Int8Weights:
    """float constant -> the int8 weight it dequantizes."""

    table: dict[tuple[tuple[int, ...], str, str], Int8Weight] = field(default_factory=dict)

    @classmethod
    def collect(cls, mod: IRModule) -> Int8Weights:
        """Every DequantizeLinear of a constant int8 tensor with a zero zero point in `mod`'s main."""
        out = cls()
        for e in post_order(mod.main.body):
            weight = _dequantized_constant(e)
            if weight is not None:
                folded = run_op(e.op, e.attrs, [a.data for a in e.args], e.name, e.type)
                out.table[_key(np.asarray(folded))] = weight
        return out

    def lookup(self, c: Constant) -> Int8Weight | None:
        return self.table.get(_key(c.data))


def _dequantized_constant(e: object) -> Int8Weight | None:
    if not (isinstance(e, Call) and getattr(e.op, "name", None) == "quant.dequantize_linear"
            and all(isinstance(a, Constant) for a in e.args) and e.args[0].data.dtype == np.int8
            and e.attrs.block_size == 0 and e.type.dtype == "float32"):
        return None
    values, scale = e.args[0].data, e.args[1].data
    if len(e.args) > 2 and np.any(e.args[2].data != 0):
        return None
    full = np.broadcast_to(expand_param(scale, values.shape, e.attrs.axis, 0), values.shape)
    return Int8Weight(values, full.astype(np.float32))
