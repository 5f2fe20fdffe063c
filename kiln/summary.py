"""Short summaries of results and graphs that the commands print: array checksums, operator counts."""

from __future__ import annotations

import collections
import zlib

import numpy as np

from kiln.ir.expr import Call, Op
from kiln.ir.visitor import post_order


def checksum(a: np.ndarray) -> str:
    a = np.asarray(a)
    if a.dtype == object:
        return f"crc32={zlib.crc32(repr(a.tolist()).encode()):08x}"
    total = float(np.sum(a.astype(np.float64))) if a.size and a.dtype.kind in "biufc" else 0.0
    return f"sum={total:.6g} crc32={zlib.crc32(np.ascontiguousarray(a).tobytes()):08x}"


def op_counts(mod) -> collections.Counter:
    counts: collections.Counter = collections.Counter()
    for fn in mod.functions.values():
        for e in post_order(fn):
            if isinstance(e, Call) and isinstance(e.op, Op):
                counts[e.op.name] += 1
    return counts
