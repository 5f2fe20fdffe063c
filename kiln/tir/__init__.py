"""The loop IR that schedules lower to, with its simplifier and passes."""

from kiln.tir.expr import *  # noqa: F401,F403
from kiln.tir.stmt import (Allocate, Buffer, BufferStore, Evaluate, For, ForKind, IfThenElse, LetStmt,  # noqa: F401
                           PrimFunc, SeqStmt, Stmt, seq)
