"""The operator library: te computes for the registry's operators (importing this registers them)."""

from kiln.topi.registry import ComputeError, compute_call, get_compute, register_compute  # noqa: F401
from kiln.topi import (broadcast, elemwise, extern, injective, linalg, nn, norm, reduction,  # noqa: F401,E402
                       scatter)
from kiln.topi import attention, crop_scatter, einsum, quant, resize  # noqa: F401,E402
from kiln.topi import loss  # noqa: F401,E402
from kiln.topi import signal, vision_more  # noqa: F401,E402
