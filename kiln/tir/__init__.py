"""The loop IR that schedules lower to, with its simplifier and passes."""

from kiln.tir.expr import *  # noqa: F401,F403
from kiln.tir.stmt import (  # noqa: F401
                           Allocate,
                           Buffer,
                           BufferStore,
                           Evaluate,
                           For,
                           ForKind,
                           IfThenElse,
                           LetStmt,
                           PrimFunc,
                           SeqStmt,
                           Stmt,
                           seq,
)
