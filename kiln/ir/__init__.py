"""The graph IR: types, expressions, modules, traversal, text form."""

from kiln.ir.expr import (Call, Constant, Expr, Function, GlobalVar, If, Let, Op, Tuple,  # noqa: F401
                          TupleGetItem, Var, absent, is_absent)
from kiln.ir.module import IRModule  # noqa: F401
from kiln.ir.types import (ANY, FuncType, OptionalType, SeqType, SizeVar, TensorType,  # noqa: F401
                           TupleType, Type)
from kiln.ir.visitor import free_vars, post_order, rewrite  # noqa: F401
