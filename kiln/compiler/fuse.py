"""Optimize and fuse: the graph passes, with FuseOps always on, so every operator is in a Primitive function."""

from __future__ import annotations

from kiln.ir.module import IRModule
from kiln.transform import PassContext
from kiln.transform.pipeline import optimize


def fuse(mod: IRModule, opt_level: int = 2, ctx: PassContext | None = None) -> IRModule:
    """The optimized module with every operator in a Primitive function (FuseOps always runs)."""
    ctx = ctx or PassContext(opt_level=opt_level)
    ctx = PassContext(opt_level, tuple(ctx.required) + ("fuse-ops",), ctx.disabled, ctx.instruments, ctx.config,
                      target=ctx.target)
    return optimize(mod, opt_level, ctx)
