"""The operator registry and every operator family (importing this registers them all)."""

from kiln.op import (  # noqa: F401,E402
                     attention,
                     control,
                     elemwise,
                     fast_math,
                     layout,
                     linalg,
                     ml,
                     nn,
                     norm,
                     quant,
                     random,
                     reduce,
                     rnn,
                     sequence,
                     signal,
                     string,
                     tensor,
                     train,
                     vision,
                     winograd,
)
from kiln.op.registry import REGISTRY, OpDef, Pattern, define_op, get_op  # noqa: F401

__all__ = ["REGISTRY", "OpDef", "Pattern", "define_op", "get_op"]
