"""The cost model that places a pipeline's cuts: each operator's modelled time and the bytes a cut moves.

An operator's one-core time is its FLOPs at the compiled kernels' rate plus the bytes it reads and
writes at the streaming rate (the rates of kiln.compiler.dataflow_choice, calibrated on this kind of
machine); a stage runs on `threads` cores with the same intra-op efficiency. A cut costs one actor
hop plus its crossing bytes at the object store's rate. Symbolic dims count as 1 (a batch dim left
symbolic scales every stage alike, so it moves no cut).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kiln.compiler.dataflow_choice import BYTE_RATE, FLOP_RATE, INTRA_EFFICIENCY
from kiln.compiler.flop_count import call_flops
from kiln.ir.dtype import to_numpy
from kiln.ir.expr import Call, Expr, is_absent
from kiln.ir.types import TensorType, TupleType, Type

TRANSFER_RATE = 1e9  # bytes/s from one actor's result to the next actor's argument (serialize, store, map)
HOP_S = 1e-3  # one classic actor call in the chain (issue 29 measured about 1 ms p50)


@dataclass(frozen=True)
class CostModel:
    """The rates a plan was made with; `threads` is each stage's core count."""

    threads: int = 1
    transfer_rate: float = TRANSFER_RATE
    hop_s: float = HOP_S

    def node_seconds(self, e: Expr) -> float:
        """Modelled time of one operator on a stage's cores (a tuple's making or taking apart costs nothing)."""
        if not isinstance(e, Call):
            return 0.0
        one = call_flops(e) / FLOP_RATE + node_bytes(e) / BYTE_RATE
        return one / (1 + (self.threads - 1) * INTRA_EFFICIENCY)

    def transfer_seconds(self, nbytes: int) -> float:
        """Modelled time to hand `nbytes` of a cut to the next stage."""
        return self.hop_s + nbytes / self.transfer_rate


def type_bytes(t: Type) -> int:
    """Bytes of a value of type `t` (a tuple's fields summed; symbolic or unknown dims as 1)."""
    if isinstance(t, TupleType):
        return sum(type_bytes(f) for f in t.fields)
    if not isinstance(t, TensorType) or t.shape is None:
        return 0
    dims = [d if isinstance(d, int) else 1 for d in t.shape]
    return int(np.prod(dims, dtype=np.int64)) * np.dtype(to_numpy(t.dtype)).itemsize


def node_bytes(e: Call) -> int:
    """Bytes an operator reads (its arguments) and writes (its result)."""
    return sum(type_bytes(a.type) for a in e.args if not is_absent(a)) + type_bytes(e.type)

