"""The operator registry and every operator family (importing this registers them all)."""

from kiln.op import (  # noqa: F401,E402
                     attention,
                     blocks,
                     concat_slice,
                     control,
                     creation,
                     elemwise,
                     fast_math,
                     gather_scatter,
                     im2col,
                     layout,
                     linalg,
                     ml,
                     nn,
                     norm,
                     pad_tile,
                     qgemm,
                     quant,
                     random,
                     reduce,
                     reshape,
                     rnn,
                     selection,
                     sequence,
                     signal,
                     string,
                     train,
                     vision,
                     winograd,
)
from kiln.op.registry import REGISTRY, OpDef, Pattern, define_op, get_op  # noqa: F401

__all__ = ["REGISTRY", "OpDef", "Pattern", "define_op", "get_op"]
