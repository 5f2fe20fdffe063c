"""Tensor expressions (te): placeholder/compute/reduce describe what; schedules decide how."""

from kiln.te.tensor import (CommReducer, ComputeOp, ExternOp, IterVar, Operation, PlaceholderOp, Range,  # noqa: F401
                            Tensor, argmax, argmin, compute, max, min, placeholder, prod, reduce_axis, sum)
from kiln.te.intrin import *  # noqa: F401,F403,E402
