"""The operator registry and every operator family (importing this registers them all)."""

from kiln.op.registry import REGISTRY, OpDef, Pattern, define_op, get_op  # noqa: F401
from kiln.op import (attention, control, elemwise, layout, linalg, ml, nn, norm, quant,  # noqa: F401,E402
                     random, reduce, rnn, sequence, signal, string, tensor, train, vision)

__all__ = ["REGISTRY", "OpDef", "Pattern", "define_op", "get_op"]
