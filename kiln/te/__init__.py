"""Tensor expressions (te): placeholder/compute/reduce describe what; schedules decide how."""

from kiln.te.intrin import *  # noqa: F401,F403,E402
from kiln.te.lower import create_prim_func  # noqa: F401,E402
from kiln.te.scan import ScanOp, scan  # noqa: F401,E402
from kiln.te.schedule import Fuse, Schedule, Split, Stage, create_schedule  # noqa: F401,E402
from kiln.te.tensor import (  # noqa: F401
                            CommReducer,
                            ComputeOp,
                            ExternOp,
                            IterVar,
                            Operation,
                            PlaceholderOp,
                            Range,
                            Tensor,
                            argmax,
                            argmin,
                            compute,
                            max,
                            min,
                            placeholder,
                            prod,
                            reduce_axis,
                            sum,
)
