"""The blocked (NCHW[x]c) x86 convolution path: alter-op-layout at the default opt_level, the
computes of layout_transform / conv2d_nchwc / pool2d_layout and the register-blocked schedule,
compiled against the interpreter on odd shapes, strides, dilation, padding, depthwise convs,
fused epilogues, blocked pooling and every tile-size knob."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

import kiln
from kiln.codegen.c_source import generate
from kiln.compiler.fuse import fuse
from kiln.compiler.lower import build_graph_executor as build
from kiln.compiler.lower import lower_groups
from kiln.ir import Constant, Function, IRModule, SizeVar, TensorType, TupleGetItem, Var
from kiln.ir.expr import Call
from kiln.ir.visitor import post_order
from kiln.op import get_op
from kiln.target import Target, building_for
from kiln.topi.knobs import KnobSpace, applying
from kiln.topi.schedule_conv_nchwc import budget, default_tiles
from kiln.transform import PassContext
from tests.helpers import op_names
from tests.topi.conftest import SCHEDULE_TEST

pytestmark = SCHEDULE_TEST
F32 = "float32"
rng = np.random.default_rng(0)


def _w(*shape) -> Constant:
    return Constant(rng.standard_normal(shape).astype(np.float32))


def _check(params: list[Var], body, feeds: dict[str, np.ndarray], config: dict | None = None,
           target: Target | None = None):
    """Compile at the default opt_level for `target` (default: the host); outputs equal the interpreter's and no
    group ran on the host."""
    mod = IRModule({"main": Function(tuple(params), body)})
    cm = build(mod, 2, PassContext(2, config=config or {}, target=target or Target.host()))
    got = cm.run(feeds)
    want = kiln.evaluate(mod, feeds)
    for g, r in zip(got, want):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4)
    assert not cm.host_groups and not cm.ran_on_host
    return cm


def _conv(x, ws, scale=True, **attrs):
    """conv + bias, times a per-channel scale (folded batch norm)."""
    y = get_op("nn.conv")(x, _w(*ws), _w(ws[0]), **attrs)
    return get_op("math.mul")(y, _w(ws[0], 1, 1)) if scale else y


CONVS = [  # (x shape, w shape, attrs)
    ((1, 8, 14, 14), (16, 8, 3, 3), dict(pads=(1, 1, 1, 1))),
    ((1, 3, 13, 11), (5, 3, 3, 3), dict(pads=(1, 1, 1, 1))),  # channels below the block, primes
    ((2, 16, 9, 17), (24, 16, 1, 1), {}),  # 1x1, batch 2, odd widths
    ((1, 16, 15, 15), (8, 16, 1, 1), dict(strides=(2, 2))),  # strided 1x1 (resnet downsample)
    ((1, 8, 16, 19), (8, 8, 3, 2), dict(dilations=(2, 3), pads=(2, 0, 1, 3))),
    ((1, 3, 23, 23), (8, 3, 7, 7), dict(strides=(2, 2), pads=(3, 3, 3, 3))),  # the stem
    ((1, 24, 1, 1), (40, 24, 1, 1), {}),  # a 1x1 map
    ((1, 12, 7, 7), (20, 12, 3, 3), dict(pads=(1, 1, 1, 1))),  # channel block 4 (12 = 3 x 4)
    ((1, 8, 5, 29), (8, 8, 3, 3), dict(strides=(1, 3), pads=(0, 1, 2, 1))),  # asymmetric pads, strides
    ((1, 16, 3, 13), (40, 16, 1, 1), {}),  # 5 blocks: 5 x 5 tiles, the last guarded
    ((1, 16, 2, 29), (56, 16, 3, 3), dict(pads=(1, 1, 1, 1))),  # 7 blocks: 1 x 14 tiles, the last guarded
    ((1, 8, 2, 44), (16, 8, 1, 1), {}),  # a guarded 7 on a 44-wide row, not block's 4
]


@pytest.mark.parametrize("xs, ws, attrs", CONVS)
def test_blocked_conv_matches_interpreter(claimed, xs, ws, attrs):
    x = Var("x", TensorType(xs, F32))
    cm = _check([x], _conv(x, ws, **attrs), {"x": rng.standard_normal(xs).astype(np.float32)})
    assert "nn.conv2d_nchwc" in op_names(cm.mod)
    assert "schedule_conv_nchwc" in claimed


DEPTHWISE = [
    ((1, 16, 15, 15), dict(pads=(1, 1, 1, 1))),
    ((1, 24, 14, 14), dict(strides=(2, 2), pads=(0, 0, 1, 1))),  # mobilenet's stride-2 padding
    ((2, 8, 9, 13), dict(dilations=(2, 2), pads=(2, 2, 2, 2))),
    ((1, 6, 7, 5), dict(pads=(1, 1, 1, 1))),  # 6 channels: block 6
    ((1, 16, 1, 1), dict(pads=(1, 1, 1, 1))),  # only padding around one pixel
]


@pytest.mark.parametrize("xs, attrs", DEPTHWISE)
def test_blocked_depthwise_matches_interpreter(claimed, xs, attrs):
    c = xs[1]
    x = Var("x", TensorType(xs, F32))
    y = get_op("math.clip")(_conv(x, (c, 1, 3, 3), group=c, **attrs), Constant(np.float32(0)),
                            Constant(np.float32(6)))
    cm = _check([x], y, {"x": rng.standard_normal(xs).astype(np.float32)})
    assert "nn.conv2d_nchwc" in op_names(cm.mod)
    assert "schedule_conv_nchwc" in claimed


def test_grouped_conv_is_blocked_inside_its_groups():
    x = Var("x", TensorType((1, 8, 10, 10), F32))
    cm = _check([x], _conv(x, (12, 4, 3, 3), group=2, pads=(1, 1, 1, 1)),
                {"x": rng.standard_normal((1, 8, 10, 10)).astype(np.float32)})
    assert "nn.conv2d_nchwc" in op_names(cm.mod) and "nn.conv" not in op_names(cm.mod)


def test_residual_block_with_symbolic_batch(claimed):
    """Two blocked (direct: Winograd off) convs exchange NCHW8c directly; residual add and relu fuse at the
    second's store."""
    n = SizeVar("n")
    x = Var("x", TensorType((n, 16, 10, 21), F32))
    h = get_op("nn.relu")(_conv(x, (16, 16, 3, 3), pads=(1, 1, 1, 1)))
    y = get_op("nn.relu")(get_op("math.add")(_conv(h, (16, 16, 3, 3), pads=(1, 1, 1, 1)), x))
    for b in (1, 3):
        cm = _check([x], y, {"x": rng.standard_normal((b, 16, 10, 21)).astype(np.float32)},
                    {"alter_op_layout.winograd": False})
    transforms = [e for e in post_order(cm.mod.main) if isinstance(e, Call)
                  and getattr(e.op, "name", "") == "tensor.layout_transform"]
    assert len(transforms) == 2  # x in once (shared by the conv and the residual), the result out once
    assert claimed.count("schedule_conv_nchwc") >= 2


@pytest.mark.parametrize("first, second", [("nn.elu", "nn.hard_sigmoid"), ("nn.elu", "nn.relu"),
                                           ("nn.leaky_relu", "nn.sigmoid"), ("nn.elu", "nn.elu")])
def test_epilogue_of_two_activations_that_select_on_data(first, second):
    """An activation that selects on its input (elu: v < 0 ? alpha * expm1(v) : v) is not a padding
    compute: it fuses into the conv's store like any other, and a second activation after it too
    (it used to be kept at the root, reading the accumulator outside its tile: the group ran on the host)."""
    x = Var("x", TensorType((1, 13, 9, 11), F32))
    y = get_op(second)(get_op(first)(_conv(x, (31, 13, 3, 3), pads=(1, 1, 1, 1))))
    _check([x], y, {"x": rng.standard_normal((1, 13, 9, 11)).astype(np.float32)})


def test_patch_embedding_keeps_its_kernel_rows_rolled():
    """An 8x8 stride-8 patch embedding of 3 channels has 24 taps a kernel row: more than a 7x7 stem's 21,
    so its kernel columns stay a loop (unrolled, gcc spent 20 s on the kernel); the stem's are unrolled."""
    def simd_loops(k: int, stride: int) -> int:
        x = Var("x", TensorType((1, 3, 8 * 7, 8 * 7), F32))
        y = _conv(x, (16, 3, k, k), scale=False, strides=(stride, stride), pads=(k // 2,) * 4 if k == 7 else (0,) * 4)
        mod = IRModule({"main": Function((x,), y)})
        kernels, _, _ = lower_groups(fuse(mod, 3))
        return generate([kern.func for kern in kernels]).code.count("omp simd")

    assert simd_loops(8, 8) < 100 < simd_loops(7, 2)


@pytest.mark.parametrize("c", [8, 12, 5])
def test_blocked_pooling_after_conv(claimed, c):
    """max pool (values only) and global average pool run in the conv's blocked layout."""
    x = Var("x", TensorType((1, 3, 17, 23), F32))
    h = get_op("nn.relu")(_conv(x, (c, 3, 3, 3), pads=(1, 1, 1, 1)))
    p = TupleGetItem(get_op("nn.max_pool")(h, kernel_shape=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1)), 0)
    a = get_op("nn.average_pool")(_conv(p, (8, c, 1, 1)), kernel_shape=(3, 3), strides=(1, 1), pads=(1, 1, 1, 1))
    y = get_op("nn.global_average_pool")(_conv(a, (16, 8, 1, 1)))
    cm = _check([x], y, {"x": rng.standard_normal((1, 3, 17, 23)).astype(np.float32)})
    assert "nn.pool2d_layout" in op_names(cm.mod)
    assert claimed.count("schedule_pool") == 3


def test_padded_channels_layout_transform():
    """alter_op_layout.pad_channels: 5 and 13 channels are padded to blocks of 8 and cropped back."""
    x = Var("x", TensorType((1, 5, 9, 9), F32))
    y = get_op("nn.relu")(_conv(_conv(x, (13, 5, 3, 3), pads=(1, 1, 1, 1)), (7, 13, 1, 1)))
    cm = _check([x], y, {"x": rng.standard_normal((1, 5, 9, 9)).astype(np.float32)},
                config={"alter_op_layout.pad_channels": True})
    assert "nn.conv2d_nchwc" in op_names(cm.mod)


def test_tile_knobs_are_asked_and_every_choice_is_correct():
    x = Var("x", TensorType((1, 16, 12, 12), F32))
    y = get_op("nn.relu")(_conv(x, (16, 16, 3, 3), pads=(1, 1, 1, 1)))
    feeds = {"x": rng.standard_normal((1, 16, 12, 12)).astype(np.float32)}
    space = KnobSpace()
    with applying({}, space):
        _check([x], y, feeds)
    assert {"conv.ow_tile", "conv.oc_tile"} <= set(space.knobs)
    for cfg in ({"conv.ow_tile": 5, "conv.oc_tile": 2}, {"conv.ow_tile": 12, "conv.oc_tile": 1},
                {"conv.ow_tile": 1, "conv.oc_tile": 4}):
        with applying(cfg):
            _check([x], y, feeds)


POINTWISE = [  # (x shape, w shape): 1x1 convs of stride 1 without padding
    ((1, 16, 7, 7), (64, 16, 1, 1)),  # 49 pixels: 8 tiles of 6 and one of 1
    ((2, 16, 9, 17), (24, 16, 1, 1)),  # batch 2, 3 blocks, odd widths
    ((1, 8, 1, 1), (16, 8, 1, 1)),  # one pixel
    ((1, 24, 5, 11), (40, 24, 1, 1)),  # 5 blocks, a prime row
]


@pytest.mark.parametrize("xs, ws", POINTWISE)
@pytest.mark.parametrize("flat", [True, False])
def test_pointwise_conv_with_flat_pixels_matches_interpreter(claimed, xs, ws, flat):
    """Knob conv.flat: the accumulator runs over all pixels as one axis (kiln.topi.layout._pointwise),
    or over rows; both equal the interpreter and keep the blocked schedule."""
    x = Var("x", TensorType(xs, F32))
    with applying({"conv.flat": flat}):
        _check([x], get_op("nn.relu")(_conv(x, ws)), {"x": rng.standard_normal(xs).astype(np.float32)})
    assert "schedule_conv_nchwc" in claimed


STRIDED_POINTWISE = [  # (x shape, w shape, strides, group): resnet's downsampling projections, odd sizes
    ((1, 16, 15, 15), (16, 16, 1, 1), (2, 2), 1),  # an odd map: 8 x 8 out
    ((2, 16, 9, 17), (24, 16, 1, 1), (2, 3), 1),  # batch 2, unequal strides, 3 blocks
    ((1, 8, 13, 14), (16, 8, 1, 1), (3, 1), 1),  # a stride of rows only
    ((1, 32, 10, 11), (32, 16, 1, 1), (2, 2), 2),  # grouped
]


@pytest.mark.parametrize("xs, ws, strides, group", STRIDED_POINTWISE)
@pytest.mark.parametrize("flat", [True, False])
def test_strided_pointwise_conv_with_flat_pixels_matches_interpreter(claimed, xs, ws, strides, group, flat):
    """A strided 1x1 conv runs flat over the pixels it reads (every sh-th row, every sw-th column)."""
    x = Var("x", TensorType(xs, F32))
    y = get_op("nn.relu")(_conv(x, ws, strides=strides, group=group))
    with applying({"conv.flat": flat}):
        cm = _check([x], y, {"x": rng.standard_normal(xs).astype(np.float32)})
        kernels, _, _ = lower_groups(fuse(IRModule({"main": Function((x,), y)}), 2))
    assert "nn.conv2d_nchwc" in op_names(cm.mod) and "schedule_conv_nchwc" in claimed
    pixels = re.search(r"(oy_ox|i2_i3)_fused_outer", generate([k.func for k in kernels]).code)  # rows and columns fused
    assert (pixels is not None) is flat


GROUPED_POINTWISE = [  # (x shape, w shape, group): whole channel blocks per group, as Winograd's products
    ((1, 32, 7, 7), (32, 16, 1, 1), 2),  # 49 pixels, two blocks in and out per group
    ((2, 32, 5, 3), (64, 8, 1, 1), 4),  # batch 2, one block in, two out per group, a prime row
    ((1, 48, 1, 1), (24, 16, 1, 1), 3),  # one pixel, one block out per group
]


@pytest.mark.parametrize("xs, ws, group", GROUPED_POINTWISE)
@pytest.mark.parametrize("flat", [True, False])
def test_grouped_pointwise_conv_with_flat_pixels_matches_interpreter(claimed, xs, ws, group, flat):
    """A grouped pointwise conv runs its pixels as one axis too, each group reading its own input blocks."""
    x = Var("x", TensorType(xs, F32))
    with applying({"conv.flat": flat}):
        cm = _check([x], get_op("nn.relu")(_conv(x, ws, group=group)),
                    {"x": rng.standard_normal(xs).astype(np.float32)})
    assert "nn.conv2d_nchwc" in op_names(cm.mod) and "schedule_conv_nchwc" in claimed


@pytest.mark.parametrize("blocks_in, groups, want", [
    (512, 16, True),  # resnet's 14x14 Winograd product: 800 KB of input, 50 KB a group
    (32, 1, True),  # an ungrouped conv keeps its rule: 50 KB
    (128, 1, False),  # 200 KB ... past half of the patched 256 KB L2
])
def test_grouped_pointwise_is_flat_by_its_groups_input(blocks_in, groups, want):
    """The flat default weighs the input one group reads, not the whole tensor."""
    from kiln.op.layout import Conv2dNCHWcAttrs
    from kiln.te import placeholder
    from kiln.te.schedule import create_schedule
    from kiln.topi.registry import compute_call
    x = placeholder((1, blocks_in, 7, 7, 8), F32, "x")
    w = placeholder((blocks_in, blocks_in // groups, 1, 1, 8, 8), F32, "w")
    attrs = Conv2dNCHWcAttrs("NCHW8c", "OIHW8i8o", group=groups)
    out = TensorType((1, blocks_in, 7, 7, 8), F32)
    with building_for(dataclasses.replace(Target.host(), l2_bytes=256 << 10, cores=2)):
        y, = compute_call("nn.conv2d_nchwc", attrs, [x, w], out, [None, None])
    acc = next(st.op for st in create_schedule([y]).stages if st.op.name == "conv_acc")
    attrs_of = dict(acc.attrs or {})
    assert ("pixels" in attrs_of) is want
    if want and groups > 1:
        assert attrs_of["per_group"] == blocks_in // groups


@pytest.mark.parametrize("strides, want", [
    ((2, 2), True),  # resnet50's 512 -> 1024 downsampling: 400 KB of the 1.6 MB input read
    ((1, 1), False),  # all 1.6 MB: past half of L2
])
def test_strided_pointwise_is_flat_by_the_pixels_it_reads(strides, want):
    from kiln.op.layout import Conv2dNCHWcAttrs
    from kiln.te import placeholder
    from kiln.te.schedule import create_schedule
    from kiln.topi.registry import compute_call
    x = placeholder((1, 64, 28, 28, 8), F32, "x")
    w = placeholder((128, 64, 1, 1, 8, 8), F32, "w")
    attrs = Conv2dNCHWcAttrs("NCHW8c", "OIHW8i8o", strides=strides)
    side = 28 // strides[0]
    with building_for(dataclasses.replace(Target.host(), l2_bytes=1 << 20, cores=2)):
        y, = compute_call("nn.conv2d_nchwc", attrs, [x, w], TensorType((1, 128, side, side, 8), F32), [None, None])
    acc = next(st.op for st in create_schedule([y]).stages if st.op.name == "conv_acc")
    assert ("pixels" in dict(acc.attrs or {})) is want


def test_flat_pixels_accumulate_one_tile_at_a_time():
    """The pixel tile's accumulators are a tile (bound inference reads y * w + x of the fused loop back as
    the loop), not every pixel of the map: 64 channels x 49 pixels would be 3136 floats."""
    x = Var("x", TensorType((1, 16, 7, 7), F32))
    mod = IRModule({"main": Function((x,), get_op("nn.relu")(_conv(x, (64, 16, 1, 1))))})
    with applying({"conv.flat": True}):
        kernels, _, host = lower_groups(fuse(mod, 2))
    assert not host
    source = generate([k.func for k in kernels]).code
    sizes = [int(n) for n in re.findall(r"float conv_acc\[(\d+)\]", source)]
    assert sizes and max(sizes) <= 4 * 7 * 16


@pytest.mark.parametrize("symbolic_batch", [False, True])
@pytest.mark.parametrize("cores", [1, 4])
def test_flat_pixel_tiles_join_the_parallel_loop_when_cores_share_channel_tiles_unevenly(cores, symbolic_batch):
    """48 channels in one-block tiles are 3 or 6 tiles (blocks of 16 or 8): even for 1 core, uneven for 4,
    where the pixel tiles join the parallel loop (mobilenet_v2's 3-tile expansions on 2 cores; a symbolic
    batch stays serial outside), and the conv still equals the interpreter."""
    target = dataclasses.replace(Target.host(), cores=cores)
    x = Var("x", TensorType((SizeVar("n") if symbolic_batch else 1, 16, 7, 7), F32))
    y = get_op("nn.relu")(_conv(x, (48, 16, 1, 1)))
    cfg = {"conv.flat": True, "conv.oc_tile": 1}
    with applying(cfg):
        kernels, _, host = lower_groups(fuse(IRModule({"main": Function((x,), y)}), 2, PassContext(2, target=target)),
                                        target=target)
        for b in (1, 2) if symbolic_batch else (1,):
            _check([x], y, {"x": rng.standard_normal((b, 16, 7, 7)).astype(np.float32)}, target=target)
    source = generate([k.func for k in kernels]).code
    loops = re.findall(r"#pragma omp parallel for\n\s*for \(int64_t (\w+) = 0LL", source)
    assert any("i1_outer" in v and v.endswith("i2_i3_fused_outer_fused") for v in loops) is (cores == 4), loops


@pytest.mark.parametrize("ws, hinted", [
    ((16, 32, 1, 1), True),  # a pointwise conv that reduces: gcc unrolls its channel loop
    ((64, 16, 1, 1), False),  # an expansion
    ((16, 32, 3, 3), False),  # a 3x3 conv
])
def test_channel_loop_unrolled_by_gcc_in_reducing_pointwise_convs(ws, hinted):
    """The loop over the channels inside an input block keeps one body in the C, with `#pragma GCC unroll`
    for the block where the conv is pointwise and reduces (schedule_conv_nchwc._unroll_channels)."""
    xs = (1, ws[1], 9, 9)
    x = Var("x", TensorType(xs, F32))
    y = get_op("nn.relu")(_conv(x, ws, pads=(1, 1, 1, 1) if ws[2] == 3 else (0, 0, 0, 0)))
    mod = IRModule({"main": Function((x,), y)})
    kernels, _, host = lower_groups(fuse(mod, 2))
    source = generate([k.func for k in kernels]).code
    block = re.findall(r"for \(int64_t ci = 0LL; ci < (\d+)LL", source)
    assert block, "no channel loop in the conv kernel"
    hint = re.search(rf"#pragma GCC unroll {block[0]}\n\s*for \(int64_t ci = 0LL", source) is not None
    assert hint is hinted
    _check([x], y, {"x": rng.standard_normal(xs).astype(np.float32)})


@pytest.mark.parametrize("input_bytes, blocks, want", [
    (200 << 10, 32, True),  # resnet50's 256 -> 1024 at 14x14: the input stays in L2
    (800 << 10, 32, False),  # 1024 -> 256 at 14x14: re-read from L3 once per channel tile
    (100 << 10, 4, False),  # 32 channels: two tiles for two cores
    (None, 64, False),  # symbolic
])
def test_flat_pixels_by_default(input_bytes, blocks, want):
    import kiln.topi.layout as topi_layout
    target = dataclasses.replace(Target.host(), l2_bytes=1 << 20, cores=2)
    assert topi_layout.flat_by_default(input_bytes, blocks, target) is want


@pytest.mark.parametrize("cfg", [{"pool.ow_tile": 4, "pool.inline_pad": False}, {"pool.ow_tile": 16}])
def test_pool_knobs(cfg):
    x = Var("x", TensorType((1, 8, 13, 13), F32))
    h = get_op("nn.relu")(_conv(x, (8, 8, 1, 1)))
    p = TupleGetItem(get_op("nn.max_pool")(h, kernel_shape=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1)), 0)
    y = get_op("nn.average_pool")(_conv(p, (8, 8, 1, 1)), kernel_shape=(2, 2), strides=(1, 1), pads=(0, 0, 1, 1))
    with applying(cfg):
        _check([x], get_op("nn.relu")(y), {"x": rng.standard_normal((1, 8, 13, 13)).astype(np.float32)})


def test_depthwise_knobs():
    x = Var("x", TensorType((1, 8, 11, 11), F32))
    y = _conv(x, (8, 1, 3, 3), group=8, pads=(1, 1, 1, 1))
    feeds = {"x": rng.standard_normal((1, 8, 11, 11)).astype(np.float32)}
    for cfg in ({"dw.ow_tile": 4, "dw.inline_pad": False}, {"dw.ow_tile": 11, "dw.inline_pad": True}):
        with applying(cfg):
            _check([x], y, feeds)


@pytest.mark.parametrize("ow, blocks, want", [
    (56, 8, (2, 7)), (28, 16, (2, 7)), (14, 32, (2, 7)), (1, 64, (8, 1)), (112, 4, (2, 7)), (None, None, (2, 7)),
    (16, 2, (2, 8)), (56, 18, (2, 7)),
    (7, 64, (4, 7)), (7, 120, (4, 7)), (4, 6, (6, 4)),  # a row in one tile: up to 28
    (56, 3, (3, 7)), (13, 3, (3, 7)),  # only one block would fit 16: up to 28
    (30, 5, (5, 5)), (7, 5, (5, 5)), (13, 125, (5, 5)), (28, 5, (5, 5)),  # no divisor fits 7 columns: 5 x 5
    (56, 11, (1, 14)), (13, 7, (1, 13)), (28, 7, (1, 14)),  # no divisor at all: one block, up to 16 columns
])
def test_default_tiles(ow, blocks, want):
    """32 vector registers (AVX-512): ~16 accumulators (28 where 16 leaves little reuse): a column tile of
    5..8 dividing the row (7 first), channel blocks dividing the channels; a channel count that no such
    tile divides gets 5 x 5 or a row of one block."""
    assert default_tiles(ow, blocks, registers=32) == want


@pytest.mark.parametrize("ow, blocks, want", [
    (56, 8, (2, 6)), (28, 16, (2, 6)), (14, 32, (2, 6)), (16, 2, (2, 6)), (12, 6, (2, 6)), (None, None, (2, 6)),
    (13, 64, (2, 6)),  # 6 + 6 + a guarded column
    (7, 64, (2, 7)), (5, 4, (2, 5)), (4, 6, (3, 4)), (1, 64, (8, 1)),  # a row in one tile: up to 14
    (56, 3, (1, 10)), (13, 125, (1, 10)), (7, 5, (1, 7)), (6, 1, (1, 6)),  # an odd block count: one block
])
def test_default_tiles_with_16_registers(ow, blocks, want):
    """16 vector registers (AVX2): the accumulators, a weight vector per block and the broadcast must fit,
    so two blocks of 6 columns (12 accumulators), the last tile of a row guarded, or one block of up to 10
    columns where two blocks do not divide the channels; a row of up to 7 is one tile; never more than 14
    accumulators."""
    assert default_tiles(ow, blocks, registers=16) == want
    assert default_tiles(ow, blocks, budget(16).wide, registers=16)[0] * want[1] <= 14


@pytest.mark.parametrize("registers, ow, blocks, want", [
    (32, 112, 4, (2, 7)), (32, 112, 8, (2, 7)), (32, 56, 3, (1, 7)), (32, 4, 6, (3, 4)),
    (16, 112, 4, (2, 6)), (16, 56, 3, (1, 10)), (16, 4, 6, (3, 4)),
])
def test_default_tiles_of_the_stem(registers, ow, blocks, want):
    """The stem (few input channels, taps unrolled) keeps 16 accumulators (14 of 16 registers)."""
    assert default_tiles(ow, blocks, budget(registers).stem, registers=registers) == want


@pytest.mark.parametrize("shape, w, attrs", [
    ((1, 16, 7, 7), (16, 16, 1, 1), {}),  # a row of 7: one tile of 2 x 7
    ((1, 8, 9, 14), (16, 8, 3, 3), dict(pads=(1, 1, 1, 1))),  # 6 + 6 + 2
    ((1, 8, 5, 13), (24, 8, 1, 1), {}),  # 3 blocks: one block x 10 + 3 guarded
    ((2, 3, 11, 19), (16, 3, 3, 3), dict(strides=(2, 2), pads=(1, 1, 1, 1))),  # a stem, 10 wide
])
def test_16_register_tiles_are_correct(monkeypatch, tmp_path, shape, w, attrs):
    """The AVX2 tiles on any host: guarded column tails and one-block rows equal the interpreter."""
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    x = Var("x", TensorType(shape, F32))
    cm = _check([x], get_op("nn.relu")(_conv(x, w, **attrs)), {"x": rng.standard_normal(shape).astype(np.float32)},
                target=dataclasses.replace(Target.host(), vector_registers=16))
    assert "nn.conv2d_nchwc" in op_names(cm.mod)


@pytest.mark.parametrize("indices", [False, True])
def test_max_pool_computes_indices_only_when_used(indices):
    """NCHW max pool (no conv to seed a blocked region): the argmax reduction exists only when the
    index output is read; the values match the interpreter either way, NaN included."""
    x = Var("x", TensorType((1, 3, 9, 11), F32))
    pool = get_op("nn.max_pool")(x, kernel_shape=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1))
    y = TupleGetItem(pool, 0)
    body = kiln.ir.Tuple((y, TupleGetItem(pool, 1))) if indices else get_op("nn.relu")(y)
    feeds = {"x": rng.standard_normal((1, 3, 9, 11)).astype(np.float32)}
    feeds["x"][0, 1, 4, 4] = np.nan
    cm = _check([x], body, feeds)
    from kiln.codegen.c_source import generate
    code = "".join(generate([k.kernel.func]).code for k in cm.kernels.values())
    assert ("max_pool_arg" in code) == indices


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_floor_mod_helper_signs(dtype):
    """kiln_runtime.h's branch-free floormod (the conv kernels' index math uses it): every sign pair."""
    a = np.array([-7, -6, -1, 0, 1, 6, 7, -128 if dtype == "int8" else -1000, 127, 5], dtype)
    b = np.array([3, -3, 2, -2, 3, -4, -7, 3, -5, 5], dtype)
    x, y = Var("x", TensorType(a.shape, dtype)), Var("y", TensorType(b.shape, dtype))
    _check([x, y], get_op("math.mod")(x, y), {"x": a, "y": b})
