"""The name -> operator table (TVM's `Op.get`): ir finds an operator by name without importing kiln.op.

kiln.op's `define_op` fills it (kiln.op.REGISTRY is this same dict); the IR parser looks names up here.
`kiln.ir` reached through the package (`import kiln; kiln.ir.parse(...)`) imports kiln.op first, and so does
the runtime (its interpreter), so the table is full whenever a parse runs through them.
"""

from __future__ import annotations

from kiln.ir.expr import Op

OPS: dict[str, Op] = {}


def register_op(op: Op) -> Op:
    if op.name in OPS:
        raise ValueError(f"operator {op.name} defined twice")
    OPS[op.name] = op
    return op


def lookup_op(name: str) -> Op:
    """The operator named `name`; KeyError if none (saying what to import while the table is empty)."""
    if name in OPS:
        return OPS[name]
    hint = "" if OPS else " (no operators are registered yet: import kiln.op)"
    raise KeyError(f"unknown operator {name!r}{hint}")
