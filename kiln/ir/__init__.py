"""The graph IR: types, expressions, modules, traversal, text form.

Every name is imported on first use (PEP 562): the runtime reads a few of its modules (types, dtype,
expr) by path, and need not pay for the parser, printer or structural comparison it never calls.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_WHERE = {
    **dict.fromkeys(("Call", "Constant", "Expr", "Function", "GlobalVar", "If", "Let", "Op", "Tuple", "TupleGetItem",
                     "Var", "absent", "is_absent"), "kiln.ir.expr"),
    "IRModule": "kiln.ir.module",
    "parse": "kiln.ir.parser", "parse_expr": "kiln.ir.parser",
    "text": "kiln.ir.printer", "text_with_params": "kiln.ir.printer",
    "structural_equal": "kiln.ir.structural", "structural_hash": "kiln.ir.structural",
    **dict.fromkeys(("ANY", "FuncType", "OptionalType", "SeqType", "SizeVar", "TensorType", "TupleType", "Type"),
                    "kiln.ir.types"),
    "free_vars": "kiln.ir.visitor", "post_order": "kiln.ir.visitor", "rewrite": "kiln.ir.visitor",
    "check_well_formed": "kiln.ir.wellformed",
}

__all__ = ["ANY", "Call", "Constant", "Expr", "FuncType", "Function", "GlobalVar", "IRModule", "If", "Let", "Op",
           "OptionalType", "SeqType", "SizeVar", "TensorType", "Tuple", "TupleGetItem", "TupleType", "Type", "Var",
           "absent", "check_well_formed", "free_vars", "is_absent", "parse", "parse_expr", "post_order", "rewrite",
           "structural_equal", "structural_hash", "text", "text_with_params"]

if TYPE_CHECKING:
    from kiln.ir.expr import (
        Call,
        Constant,
        Expr,
        Function,
        GlobalVar,
        If,
        Let,
        Op,
        Tuple,
        TupleGetItem,
        Var,
        absent,
        is_absent,
    )
    from kiln.ir.module import IRModule
    from kiln.ir.parser import parse, parse_expr
    from kiln.ir.printer import text, text_with_params
    from kiln.ir.structural import structural_equal, structural_hash
    from kiln.ir.types import ANY, FuncType, OptionalType, SeqType, SizeVar, TensorType, TupleType, Type
    from kiln.ir.visitor import free_vars, post_order, rewrite
    from kiln.ir.wellformed import check_well_formed


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use."""
    if name not in _WHERE:
        raise AttributeError(f"module 'kiln.ir' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value
