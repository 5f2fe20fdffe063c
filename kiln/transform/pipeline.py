"""The standard pipelines: one plain list of passes, each with the lowest opt_level it runs at."""

from __future__ import annotations

from kiln.ir.module import IRModule
from kiln.transform import PASSES
from kiln.transform.infra import PassContext, Sequential

# in order; PassContext.opt_level decides which run (a pass runs when its level <= opt_level)
STANDARD = [
    "infer-type",
    "remove-unused-functions",
    "dead-code-elimination",
    "simplify-inference",
    "int8-ops",  # before folding: it reads quantized weights, which folding would dequantize
    "fold-constant",
    "simplify-inference",  # again: exporters build masks from shapes, constants only after folding
    "simplify-expr",
    "fold-scale-axis",
    "fold-constant",
    "eliminate-common-subexpr",
    "combine-parallel-conv2d",
    "combine-parallel-dense",
    "conv-transpose-to-conv",
    "conv1d-as-conv2d",
    "attention-heads",
    "alter-op-layout",
    "to-mixed-precision",
    "fast-math",
    "split-rnn-projection",
    "pack-dense",
    "fold-constant",
    "fuse-ops",
]


def standard_pipeline() -> Sequential:
    return Sequential(tuple(PASSES[name] for name in STANDARD if name in PASSES))


def optimize(mod: IRModule, opt_level: int = 2, ctx: PassContext | None = None) -> IRModule:
    """Run the standard pipeline at `opt_level` (0: bookkeeping only ... 3: everything)."""
    ctx = ctx or PassContext(opt_level=opt_level)
    if ctx.opt_level != opt_level:
        ctx = PassContext(opt_level, ctx.required, ctx.disabled, ctx.instruments, ctx.config)
    return standard_pipeline()(mod, ctx)
