"""`Kernel`: a fused group lowered to a tir PrimFunc, with its constants and calling signature.

Its own module, apart from the lowering that makes it (kiln.codegen.lower_fused, which imports te and
topi), because the runtime holds Kernels too: a loaded artifact rebuilds them from their signatures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from kiln.ir.types import TensorType
    from kiln.tir.stmt import PrimFunc


@dataclass
class Kernel:
    """A compiled-to-be kernel and how to call it from a fused call site."""

    func: PrimFunc  # after the tir passes: what the C backend compiles (flat buffers)
    constants: list[np.ndarray]  # passed after the group's parameters, in order
    num_params: int  # tensor parameters of the group
    output_types: list[TensorType]
    signature: tuple = ()  # the params before flattening: multi-dim buffer shapes, symbolic dims
