"""The graph IR: types, expressions, modules, traversal, text form."""

from kiln.ir.expr import (  # noqa: F401
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
from kiln.ir.module import IRModule  # noqa: F401
from kiln.ir.parser import parse, parse_expr  # noqa: F401
from kiln.ir.printer import text, text_with_params  # noqa: F401
from kiln.ir.structural import structural_equal, structural_hash  # noqa: F401
from kiln.ir.types import ANY, FuncType, OptionalType, SeqType, SizeVar, TensorType, TupleType, Type  # noqa: F401
from kiln.ir.visitor import free_vars, post_order, rewrite  # noqa: F401
from kiln.ir.wellformed import check_well_formed  # noqa: F401
