"""ConvertLayout and AlterOpLayout: move conv-based regions of a graph to another data layout.

ConvertLayout runs 2-D convs in a desired layout (NHWC <-> NCHW); AlterOpLayout runs them in
the blocked NCHW[x]c form that vectorized kernels want. Both seed regions with a conv rule and
let the engine in kiln/transform/relayout.py carry the layout and place the transforms.
"""

from __future__ import annotations

from kiln.ir.expr import Call, Expr, Function
from kiln.ir.module import IRModule
from kiln.transform.infra import PassContext, function_pass
from kiln.transform.layout_rules import transform
from kiln.transform.relayout import Conv2d, InLayout, Relayout, checked, rank

# ---------------------------------------------------------------------------------------------
# ConvertLayout

DEFAULT_DESIRED = {"nn.conv": ("NHWC", "default")}
DEFAULT_KERNEL = {"NCHW": "OIHW", "NHWC": "HWIO"}


def desired_layouts(ctx: PassContext) -> tuple[str, str]:
    """(data, kernel) layout for 2-D convs from PassContext.config["convert_layout.desired"]."""
    want = dict(ctx.config.get("convert_layout.desired", DEFAULT_DESIRED))
    data, kernel = want.get("nn.conv", ("NHWC", "default"))
    if data not in DEFAULT_KERNEL:
        raise ValueError(f"convert_layout.desired: data layout {data!r} is not NCHW or NHWC")
    kernel = DEFAULT_KERNEL[data] if kernel == "default" else kernel
    if sorted(kernel) != sorted("OIHW") or (data == "NCHW" and kernel != "OIHW"):
        raise ValueError(f"convert_layout.desired: kernel layout {kernel!r} does not fit {data}")
    return data, kernel


def convert_conv_rule(data: str, kernel: str):
    def rule(eng: Relayout, call: Call) -> InLayout | Expr | None:
        conv = Conv2d.of(call)
        if conv is None or (conv.data, conv.kernel) == (data, kernel):
            return None
        x = eng.get(conv.x, conv.data, data)
        if x is None or rank(conv.w) != 4:
            return None
        w = transform(eng.plain(conv.w), conv.kernel, kernel)
        b = eng.plain(conv.b) if conv.b is not None else None
        new = conv.build(x, w, b, data, kernel)
        return new if data == conv.data else checked(new, call, InLayout(new, conv.data, data))
    return rule


@function_pass("convert-layout", opt_level=3)
def convert_layout(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
    """Run 2-D convs in the desired layout (default NHWC/HWIO), carrying it across
    layout-agnostic ops so transforms sit only at the edges of conv regions."""
    return Relayout(convert_conv_rule(*desired_layouts(ctx))).run(fn)


# ---------------------------------------------------------------------------------------------
# AlterOpLayout

DEFAULT_BLOCK = 8  # PassContext.config["alter_op_layout.block"]


def choose_block(c: int, block: int, pad: bool) -> int:
    """Channel block for `c` channels: `block` when it divides c; else, padding allowed, `block`
    (or c itself when smaller); else the largest divisor of c up to `block`."""
    if c % block == 0:
        return block
    if pad:
        return min(c, block)
    return max(d for d in range(1, min(block, c) + 1) if c % d == 0)


def alter_conv_rule(block: int, pad: bool):
    def rule(eng: Relayout, call: Call) -> InLayout | None:
        conv = Conv2d.of(call)
        if conv is None or conv.data != "NCHW":
            return None
        group = conv.geometry.get("group", 1)
        xs, ws = conv.x.type.shape, conv.w.type.shape  # type: ignore[union-attr]
        if ws is None or not all(isinstance(d, int) for d in ws) or xs is None or xs[1] != ws[1] * group:
            return None
        if call.type.dtype not in ("float16", "bfloat16", "float32", "float64"):  # type: ignore[union-attr]
            return None
        depthwise = group > 1 and ws[1] == 1 and ws[0] == group
        if group != 1 and not depthwise:
            return None
        ic, oc = choose_block(ws[1], block, pad), choose_block(ws[0], block, pad)
        ic = oc if depthwise else ic
        data, kernel, out = f"NCHW{ic}c", f"OIHW{1 if depthwise else ic}i{oc}o", f"NCHW{oc}c"
        x = eng.get(conv.x, "NCHW", data)
        if x is None:
            return None
        w = transform(eng.plain(conv.w), conv.kernel, kernel)
        b = transform(eng.plain(conv.b), "C", f"C{oc}c") if conv.b is not None else None
        new = conv.build(x, w, b, data, kernel)
        return checked(new, call, InLayout(new, "NCHW", out))
    return rule


@function_pass("alter-op-layout", opt_level=2)
def alter_op_layout(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
    """NCHW convs (and depthwise ones; other grouped convs stay) to the blocked NCHW[x]c conv with
    weights packed at compile time; consecutive blocked convs exchange blocked tensors directly."""
    block = int(ctx.config.get("alter_op_layout.block", DEFAULT_BLOCK))
    pad = bool(ctx.config.get("alter_op_layout.pad_channels", False))
    return Relayout(alter_conv_rule(block, pad)).run(fn)
