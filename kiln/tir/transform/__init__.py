"""tir passes (each PrimFunc -> PrimFunc) and the standard lowering pipeline."""

from kiln.tir.stmt import PrimFunc
from kiln.tir.transform.hoist_conditions import hoist_conditions
from kiln.tir.transform.loop_partition import loop_partition
from kiln.tir.transform.simplify import simplify
from kiln.tir.transform.storage_flatten import storage_flatten
from kiln.tir.transform.unroll import unroll
from kiln.tir.transform.unswitch import unswitch
from kiln.tir.transform.vectorize import vectorize

# unroll before vectorize: an unrolled loop inside a vectorized one becomes straight-line stores
LOWER_PIPELINE = (simplify, loop_partition, simplify, storage_flatten, simplify, unroll, simplify, vectorize, unswitch,
                  simplify, hoist_conditions, simplify)


def lower_passes(func: PrimFunc, skip: tuple[str, ...] = ()) -> PrimFunc:
    """Run the standard tir pipeline (less the passes named in `skip`): the PrimFunc the C backend
    receives. A pass that changes nothing returns its argument, so the simplify after it is skipped."""
    simplified = None  # the function as the last simplify returned it: simplify is idempotent
    for p in LOWER_PIPELINE:
        if p.__name__ in skip or (p is simplify and func is simplified):
            continue
        func = p(func)
        if p is simplify:
            simplified = func
    return func


__all__ = ["LOWER_PIPELINE", "hoist_conditions", "loop_partition", "lower_passes", "simplify", "storage_flatten",
           "unroll", "unswitch", "vectorize"]
