"""The operator library: te computes for the registry's operators (importing this registers them)."""

from kiln.topi import (  # noqa: F401,E402  # noqa: F401,E402  # noqa: F401,E402  # noqa: F401,E402  # noqa: F401,E402
                       attention,
                       broadcast,
                       causal_conv,  # noqa: F401,E402
                       compress,
                       conv_integer,  # noqa: F401,E402
                       crop_scatter,
                       deform_conv,
                       einsum,
                       elemwise,
                       extern,
                       fast_math,  # noqa: F401,E402
                       flex_attention,
                       im2col,
                       injective,
                       integer_linalg,
                       layout,  # noqa: F401,E402
                       linalg,
                       linear_attention,  # noqa: F401,E402
                       loss,  # noqa: F401,E402
                       mel,
                       ml,  # noqa: F401,E402
                       ngram,  # noqa: F401,E402
                       nn,
                       norm,
                       qgemm,
                       qlinear_conv,
                       qlinear_matmul,
                       quant,
                       reduction,
                       resize,
                       rnn,  # noqa: F401,E402
                       rotary_embedding,
                       runtime_window,
                       scatter,
                       scatter_back,
                       signal,
                       train,  # noqa: F401,E402
                       vision_sampling,
                       windows,  # noqa: F401,E402
                       x86_dense,  # noqa: F401,E402
)
from kiln.topi.registry import ComputeError, compute_call, get_compute, register_compute  # noqa: F401
