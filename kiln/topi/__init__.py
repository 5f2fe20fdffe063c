"""The operator library: te computes for the registry's operators (importing this registers them)."""

from kiln.topi.registry import ComputeError, compute_call, get_compute, register_compute  # noqa: F401
from kiln.topi import (broadcast, elemwise, extern, injective, linalg, nn, norm, reduction,  # noqa: F401,E402
                       scatter)
from kiln.topi import attention, crop_scatter, einsum, quant, resize  # noqa: F401,E402
from kiln.topi import loss  # noqa: F401,E402
from kiln.topi import qlinear_matmul, rotary_embedding, signal  # noqa: F401,E402
from kiln.topi import compress, deform_conv, runtime_window, scatter_back, vision_sampling  # noqa: F401,E402
from kiln.topi import x86_dense  # noqa: F401,E402
from kiln.topi import layout  # noqa: F401,E402
from kiln.topi import train  # noqa: F401,E402
from kiln.topi import rnn  # noqa: F401,E402
from kiln.topi import windows  # noqa: F401,E402
from kiln.topi import causal_conv  # noqa: F401,E402
from kiln.topi import conv_integer  # noqa: F401,E402
from kiln.topi import linear_attention  # noqa: F401,E402
from kiln.topi import ngram  # noqa: F401,E402
from kiln.topi import ml  # noqa: F401,E402
from kiln.topi import fast_math  # noqa: F401,E402
from kiln.topi import integer_linalg, qlinear_conv, mel, flex_attention  # noqa: F401,E402
