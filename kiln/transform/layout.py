"""ConvertLayout and AlterOpLayout: move conv-based regions of a graph to another data layout.

ConvertLayout runs 2-D convs in a desired layout (NHWC <-> NCHW); AlterOpLayout runs them in
the blocked NCHW[x]c form that vectorized kernels want. Both seed regions with a conv rule and
let the engine in kiln/transform/relayout.py carry the layout and place the transforms.
"""

from __future__ import annotations

from dataclasses import replace

from kiln.ir.expr import Call, Constant, Expr, Function
from kiln.ir.module import IRModule
from kiln.op import get_op
from kiln.op.layout import Conv2dNCHWcAttrs
from kiln.op.winograd import (
    WinogradInputAttrs,
    WinogradOutputAttrs,
    transform_weight,
    winograd_input,
    winograd_output,
    winograd_safe,
)
from kiln.target import Target
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


@function_pass("convert-layout", opt_level=3, config=("convert_layout.desired",))
def convert_layout(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
    """Run 2-D convs in the desired layout (default NHWC/HWIO), carrying it across
    layout-agnostic ops so transforms sit only at the edges of conv regions."""
    return Relayout(convert_conv_rule(*desired_layouts(ctx))).run(fn)


# ---------------------------------------------------------------------------------------------
# AlterOpLayout

MIN_BLOCK = 8  # the narrowest block a wider default block falls back to (one AVX2 vector of float32)
DEFAULT_PAD = True  # PassContext.config["alter_op_layout.pad_channels"]: True, False (see choose_block)
DEFAULT_WINOGRAD = "auto"  # PassContext.config["alter_op_layout.winograd"]: "auto", True (every eligible conv), False
WINOGRAD_TILE = 4  # m of F(m x m, 3 x 3) when forced (True); PassContext.config["alter_op_layout.winograd_tile"]
# "auto": (m, least output side, whether the last tile may be cropped), the first that applies. F(4x4) where 4
# divides the output (a cropped F(4x4) at 30x30, 64 channels, ran 2.1x slower than F(2x2), though 0.81-0.95x at
# 26 and 27); F(2x2) from 7x7 up, a cropped last tile on odd sides. Against direct convs (two 3x3 convs and a
# residual, kernels paired in one process, 2 / 1 threads): 7x7 with 64, 128, 256, 512 channels 0.93 / 0.82,
# 0.75 / 0.73, 0.81 / 0.88-0.94, 0.83 / 0.81x; 13x13 (256) 0.64 / 0.57x, 15x15 (128) 0.62 / 0.64x, 27x27 (64)
# 0.58 / 0.56x; resnet18 (its three 512-channel 7x7 convs) 0.93-0.95x / 0.91-0.92x, resnet50 (two) 0.96-1.00x.
# (F(2x2)'s products once ran 7x7 as rows of a 2 x 7 tile; since they run flat, 7x7 pays for weights 16/9 larger)
WINOGRAD_AUTO = ((4, 28, False), (2, 7, True))


def default_block(target: Target) -> int:
    """Channels a block: one vector of float32 of the target, 16 with AVX-512 (8 with AVX2). On Zen 4 (AVX-512
    run as two 256-bit halves) a 16-float accumulator halves the broadcasts per FMA and makes fused
    epilogues (SiLU) 16 wide. 16 against 8, Kiln alone, alternating: 2 threads, resnet18 0.96x, resnet50
    0.95x, mobilenet_v2 0.98x (its 24 channels in blocks of 8); 1 thread, YOLOv5-like 0.90x,
    EfficientNet-like 0.90x, ResNeXt-like 0.90x, U-Net 0.84-0.88x, SqueezeNet-like 0.97x, ConvNeXt-like
    0.96x."""
    return target.vector_bytes // 4


def choose_block(c: int, block: int, pad: bool) -> int:
    """Channel block for `c` channels: `block` when it divides c; else half of it (16 -> 8) when that
    divides c; else, padding allowed, the block that pads least (c itself when smaller: one partial
    vector); else the largest divisor of c up to `block`.
    Padding is the default: a divisor block is a partial vector (6 channels: a 4-wide and a 2-wide op)
    or none (17 channels: blocks of 1, scalar code), while padding wastes at most block - 1 channels.
    1 thread, padded against divisor blocks (padding up to an eighth of c was the rule before):
    a 126 -> 17 1x1 conv 0.087 vs 0.474 ms, 32 -> 9 3x3 0.47 vs 2.57 ms; an HRNet-style model (17 and 18
    channels) 0.62x, a GhostNet-style one (12, 21, 41) 0.61x, ESPCN (9) 0.77x, a spatial transformer (10,
    20) 0.69x, a RegNet-style one (12: 2 blocks of 6 or of 8) 1.016x. Earlier, with padding up to an
    eighth: YOLO's 255-channel heads and ShuffleNet's 58 and 116 got whole vectors, where the divisors 5,
    2 and 4 left lanes idle (a YOLOv5-style model's kernels 20.0 -> 17.6 ms, a ShuffleNet-v2-style
    model's 27.7 -> 13.3 ms). Winograd needs whole blocks, so a padded 3x3 conv runs direct."""
    if c % block == 0:
        return block
    halves = [b for b in (block // 2, block // 4) if b >= MIN_BLOCK and block % b == 0]
    whole = next((b for b in halves if c % b == 0), None)
    if whole is not None:
        return whole  # 24 or 40 channels in blocks of 8, not padded to 32 or 48
    fits = [b for b in (block, *halves) if b <= c]
    if pad and fits:
        return min(fits, key=lambda b: (-(-c // b) * b, -b))  # 100 channels: 13 blocks of 8, not 7 of 16
    if pad:
        return c
    return max(d for d in range(1, min(block, c) + 1) if c % d == 0)


def alter_conv_rule(block: int, pad: bool, winograd: str | bool = DEFAULT_WINOGRAD, tile: int = WINOGRAD_TILE):
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
        if depthwise:
            ic = oc = choose_block(ws[0], block, pad)
            if ws[0] % oc:  # padded channels: a group each, as many groups as channels held
                conv = replace(conv, geometry={**conv.geometry, "group": -(-ws[0] // oc) * oc})
        elif group > 1:  # blocks inside groups: a group is whole input and output channel blocks
            ic, oc = choose_block(ws[1], block, False), choose_block(ws[0] // group, block, False)
        else:
            ic, oc = choose_block(ws[1], block, pad), choose_block(ws[0], block, pad)
        m = winograd_tile(conv, call, ic, oc, winograd, tile) if not depthwise else None
        new_wino = _winograd_conv(eng, conv, call, m, ic, oc) if m is not None else None
        if new_wino is not None:
            return new_wino
        data, kernel, out = f"NCHW{ic}c", f"OIHW{1 if depthwise else ic}i{oc}o", f"NCHW{oc}c"
        x = eng.get(conv.x, "NCHW", data)
        if x is None:
            return None
        w = transform(eng.plain(conv.w), conv.kernel, kernel)
        b = transform(eng.plain(conv.b), "C", f"C{oc}c") if conv.b is not None else None
        new = conv.build(x, w, b, data, kernel)
        return checked(new, call, InLayout(new, "NCHW", out))
    return rule


@function_pass("alter-op-layout", opt_level=2, config=("alter_op_layout.block", "alter_op_layout.pad_channels",
                                                           "alter_op_layout.winograd", "alter_op_layout.winograd_tile"))
def alter_op_layout(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
    """NCHW convs (grouped ones blocked inside their groups) to the blocked NCHW[x]c conv with
    weights packed at compile time; consecutive blocked convs exchange blocked tensors directly."""
    block = int(ctx.config.get("alter_op_layout.block", default_block(ctx.target)))
    pad = ctx.config.get("alter_op_layout.pad_channels", DEFAULT_PAD)
    if pad not in (True, False):
        raise ValueError(f"alter_op_layout.pad_channels must be true or false, got {pad!r}")
    winograd = ctx.config.get("alter_op_layout.winograd", DEFAULT_WINOGRAD)
    tile = int(ctx.config.get("alter_op_layout.winograd_tile", WINOGRAD_TILE))
    return Relayout(alter_conv_rule(block, pad, winograd, tile)).run(fn)


# ---------------------------------------------------------------------------------------------
# Winograd: 3x3 stride-1 convs as input transform -> grouped 1x1 blocked conv (batched GEMM) -> output
# transform (kiln/op/winograd.py)


def winograd_tile(conv: Conv2d, call: Call, ic: int, oc: int, mode: str | bool, tile: int) -> int | None:
    """m when this conv runs as Winograd F(m x m, 3 x 3), else None: float32, 3x3, stride 1, no dilation,
    one group, whole channel blocks and a constant weight; under "auto" only maps that win (measured)."""
    if mode is False or mode is None or mode == "off":
        return None
    geo = conv.geometry
    xs, ws, ys = conv.x.type.shape, conv.w.type.shape, call.type.shape  # type: ignore[union-attr]
    if call.type.dtype != "float32" or tuple(ws[2:]) != (3, 3) or geo.get("group", 1) != 1:  # type: ignore[union-attr]
        return None
    if any(s != 1 for s in geo.get("strides") or (1, 1)) or any(d != 1 for d in geo.get("dilations") or (1, 1)):
        return None
    if geo.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID") or ys is None:
        return None
    if not all(isinstance(d, int) for d in (*ys[1:], *xs[1:])) or ws[1] % ic or ws[0] % oc:
        return None
    if mode != "auto":
        return tile
    return next((m for m, least, crop in WINOGRAD_AUTO
                 if min(ys[2], ys[3]) >= least and (crop or (ys[2] % m == 0 and ys[3] % m == 0))), None)


def _winograd_conv(eng: Relayout, conv: Conv2d, call: Call, m: int, ic: int, oc: int) -> InLayout | None:
    w = eng.plain(conv.w)
    if not isinstance(w, Constant) or not winograd_safe(w.data):
        return None
    x = eng.get(conv.x, "NCHW", f"NCHW{ic}c")
    if x is None:
        return None
    alpha = m + 2
    pads = tuple(conv.geometry.get("pads") or (0, 0, 0, 0))
    ys = call.type.shape  # type: ignore[union-attr]
    out = (ys[2], ys[3])
    v = winograd_input(x, attrs=WinogradInputAttrs(m, pads, out))
    kernel = f"OIHW{ic}i{oc}o"
    u = transform(Constant(transform_weight(w.data, m)), "OIHW", kernel)
    gemm = get_op("nn.conv2d_nchwc")(v, u, attrs=Conv2dNCHWcAttrs(f"NCHW{ic}c", kernel, group=alpha * alpha))
    args = (gemm,) if conv.b is None else (gemm, transform(eng.plain(conv.b), "C", f"C{oc}c"))
    y = winograd_output(*args, attrs=WinogradOutputAttrs(m, out))
    return checked(y, call, InLayout(y, "NCHW", f"NCHW{oc}c"))
