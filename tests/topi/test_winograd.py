"""Winograd F(m x m, 3 x 3) convolution on x86: the transform matrices, the operators' references, the
grouped blocked conv (its batched GEMM) and the compiled transforms with fused epilogues, against the
interpreter on odd shapes (primes, 1x1 maps, channel blocks below 8, padding 0/1/asymmetric)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import kiln
from kiln.compiler.lower import build_graph_executor as build
from kiln.ir import Constant, Function, IRModule, TensorType, Var
from kiln.ir.expr import Call
from kiln.ir.visitor import post_order
from kiln.op import get_op
from kiln.op.layout import Conv2dNCHWcAttrs
from kiln.op.winograd import transform_weight, winograd_matrices
from kiln.transform import PassContext
from kiln.transform.layout_rules import transform
from tests.helpers import op_names
from tests.topi.conftest import SCHEDULE_TEST

pytestmark = SCHEDULE_TEST
F32 = "float32"
rng = np.random.default_rng(0)


def _w(*shape) -> Constant:
    return Constant(rng.standard_normal(shape).astype(np.float32))


def _check(params, body, feeds, config, rtol=1e-4, atol=1e-4):
    mod = IRModule({"main": Function(tuple(params), body)})
    cm = build(mod, 2, PassContext(2, config=config))
    want = kiln.evaluate(mod, feeds)
    for g, r in zip(cm.run(feeds), want):
        np.testing.assert_allclose(g, r, rtol=rtol, atol=atol * max(1.0, float(np.abs(r).max())))
    assert not cm.host_groups and not cm.ran_on_host
    return cm


@pytest.mark.parametrize("m", [2, 4])
def test_matrices_compute_a_correlation(m: int):
    at, g, bt = winograd_matrices(m)
    assert at.shape == (m, m + 2) and g.shape == (m + 2, 3) and bt.shape == (m + 2, m + 2)
    r = np.random.default_rng(m)
    for _ in range(5):
        d, k = r.standard_normal(m + 2), r.standard_normal(3)
        want = np.array([d[i:i + 3] @ k for i in range(m)])
        np.testing.assert_allclose(at @ ((g @ k) * (bt @ d)), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("m, dtype", [(2, np.float64), (4, np.float64), (4, np.float32)])
def test_transform_weight_is_the_gemm_weight_of_each_position(m, dtype):
    """Group (i, j) of the GEMM weight holds (G g G^T)[i, j] of every (out, in) channel pair."""
    w = rng.standard_normal((5, 3, 3, 3)).astype(dtype)
    u = transform_weight(w, m)
    _, g, _ = winograd_matrices(m)
    alpha = m + 2
    assert u.shape == (alpha * alpha * 5, 3, 1, 1) and u.dtype == w.dtype
    want = np.einsum("ir,kcrs,js->ijkc", g, w.astype(np.float64), g).reshape(alpha * alpha * 5, 3, 1, 1)
    np.testing.assert_allclose(u, want, rtol=1e-6 if dtype == np.float32 else 1e-12, atol=1e-6)
    np.testing.assert_allclose(u[(alpha + 1) * 5 + 4, 2, 0, 0], (g @ w[4, 2].astype(np.float64) @ g.T)[1, 1],
                               rtol=1e-6)


CONVS = [  # (x shape, out channels, pads, tile)
    ((1, 8, 13, 11), 16, (1, 1, 1, 1), 4),  # primes: cropped last tiles
    ((1, 8, 13, 11), 8, (1, 1, 1, 1), 2),
    ((2, 16, 8, 8), 8, (1, 1, 1, 1), 4),  # batch 2, whole tiles
    ((1, 8, 7, 9), 8, (0, 0, 0, 0), 4),  # no padding
    ((1, 8, 6, 5), 8, (0, 1, 2, 1), 2),  # asymmetric padding
    ((1, 8, 1, 1), 8, (1, 1, 1, 1), 4),  # a 1x1 map: one tile, mostly padding
    ((1, 8, 3, 3), 8, (0, 0, 0, 0), 2),  # a 1x1 output
    ((1, 12, 9, 10), 20, (1, 1, 1, 1), 4),  # channel blocks 6 and 5 (unpadded: Winograd needs whole blocks)
    ((1, 3, 11, 7), 5, (1, 1, 1, 1), 2),  # channel blocks 3 and 5, below the vector
]


@pytest.mark.parametrize("xs, oc, pads, m", CONVS)
def test_winograd_conv_matches_interpreter(claimed, xs, oc, pads, m):
    x = Var("x", TensorType(xs, F32))
    y = get_op("nn.conv")(x, _w(oc, xs[1], 3, 3), _w(oc), pads=pads)
    cm = _check([x], get_op("nn.relu")(y), {"x": rng.standard_normal(xs).astype(np.float32)},
                {"alter_op_layout.winograd": True, "alter_op_layout.winograd_tile": m, "alter_op_layout.pad_channels": False})
    ops = op_names(cm.mod)
    assert "nn.winograd_input" in ops and "nn.winograd_output" in ops and "nn.conv" not in ops
    assert {"schedule_winograd_input", "schedule_winograd_output"} <= set(claimed)


def test_epilogues_fuse_after_the_output_transform(claimed):
    """bias, folded batch norm (a per-channel scale), residual add and relu run in the output transform's
    kernel; a chain of two Winograd convs exchanges blocked tensors directly."""
    xs = (1, 16, 12, 12)
    x = Var("x", TensorType(xs, F32))
    y = get_op("nn.conv")(x, _w(16, 16, 3, 3), _w(16), pads=(1, 1, 1, 1))
    y = get_op("nn.relu")(get_op("math.mul")(y, _w(16, 1, 1)))
    z = get_op("nn.conv")(y, _w(16, 16, 3, 3), pads=(1, 1, 1, 1))
    z = get_op("nn.relu")(get_op("math.add")(z, x))
    cm = _check([x], z, {"x": rng.standard_normal(xs).astype(np.float32)}, {"alter_op_layout.winograd": True})
    ops = op_names(cm.mod)
    assert ops.count("nn.winograd_output") == 2 and ops.count("tensor.layout_transform") == 2
    for f in cm.mod.functions.values():
        for e in post_order(f):
            if isinstance(e, Call) and isinstance(e.op, Function) and any(
                    getattr(c.op, "name", "") == "nn.winograd_output" for c in post_order(e.op.body)
                    if isinstance(c, Call)):
                assert {"nn.relu"} <= set(op_names(IRModule({"main": e.op})))


def test_winograd_off_keeps_the_direct_conv():
    xs = (1, 8, 28, 28)
    x = Var("x", TensorType(xs, F32))
    y = get_op("nn.conv")(x, _w(8, 8, 3, 3), pads=(1, 1, 1, 1))
    cm = _check([x], y, {"x": rng.standard_normal(xs).astype(np.float32)}, {"alter_op_layout.winograd": False})
    assert "nn.winograd_input" not in op_names(cm.mod) and "nn.conv2d_nchwc" in op_names(cm.mod)


GROUPED = [  # (x shape NCHW, w shape OIHW, group, block, attrs)
    ((1, 16, 5, 7), (32, 4, 1, 1), 4, 4, {}),  # Winograd's form: 1x1, whole blocks per group
    ((2, 12, 7, 5), (6, 4, 3, 3), 3, 2, dict(pads=(1, 0, 1, 2))),  # 3x3, padded, 2 blocks in and 1 out per group
    ((1, 32, 6, 6), (16, 16, 3, 3), 2, 8, dict(strides=(2, 2), pads=(1, 1, 1, 1))),
]


@pytest.mark.parametrize("xs, ws, group, blk, attrs", GROUPED)
def test_grouped_blocked_conv_matches_interpreter(claimed, xs, ws, group, blk, attrs):
    """conv2d_nchwc with groups of whole channel blocks: the register-tiled schedule claims it."""
    x = Var("x", TensorType(xs, F32))
    data, kernel = f"NCHW{blk}c", f"OIHW{blk}i{blk}o"
    w = transform(_w(*ws), "OIHW", kernel)
    b = transform(_w(ws[0]), "C", f"C{blk}c")
    y = get_op("nn.conv2d_nchwc")(transform(x, "NCHW", data), w, b,
                                  attrs=Conv2dNCHWcAttrs(data, kernel, group=group, **attrs))
    body = transform(get_op("nn.relu")(y), f"NCHW{blk}c", "NCHW")
    _check([x], body, {"x": rng.standard_normal(xs).astype(np.float32)}, {})
    assert "schedule_conv_nchwc" in claimed


def test_grouped_reference_is_the_nchw_grouped_conv():
    x = rng.standard_normal((1, 8, 4, 4)).astype(np.float32)
    w = rng.standard_normal((4, 4, 3, 3)).astype(np.float32)
    want = get_op("nn.conv").reference(get_op("nn.conv").attrs_type(group=2, pads=(1, 1, 1, 1)), x, w)
    from kiln.op.layout import convert_array
    got = get_op("nn.conv2d_nchwc").reference(
        Conv2dNCHWcAttrs("NCHW4c", "OIHW4i2o", group=2, pads=(1, 1, 1, 1)),
        convert_array(x, "NCHW", "NCHW4c"), convert_array(w, "OIHW", "OIHW4i2o"))
    np.testing.assert_allclose(convert_array(got, "NCHW2c", "NCHW"), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("config", [{"winograd.separable_input": False}, {"winograd.separable_output": True},
                                    {"winograd.positions_outer": True}, {"winograd.positions_outer": False}])
def test_transform_knobs(config):
    """The one-stage and separable forms of each transform compute the same conv."""
    from kiln.topi.knobs import applying

    xs = (1, 8, 11, 13)
    x = Var("x", TensorType(xs, F32))
    y = get_op("nn.relu")(get_op("nn.conv")(x, _w(16, 8, 3, 3), _w(16), pads=(1, 1, 1, 1)))
    with applying(config):
        _check([x], y, {"x": rng.standard_normal(xs).astype(np.float32)}, {"alter_op_layout.winograd": True})


def _input_transform(cm) -> str:
    code = cm.library.source.code
    bodies = code[code.index("kiln:unit"):].split("KILN_BODY int32_t kiln_body_")
    found = [b for b in bodies if "winograd_rows" in b]
    assert len(found) == 1
    return found[0]


@pytest.mark.parametrize("per_tile_row", [True, False])
def test_input_transform_makes_its_rows_per_tile_row(per_tile_row):
    """By default the padded rows and their row sums are made per (channel block, tile row), on the
    stack, inside the transform's one parallel loop; the other form makes each stage at the root, in a
    heap buffer and, when it is big enough, a parallel loop of its own (another partition of the rows)."""
    from kiln.topi.knobs import applying

    xs = (1, 16, 28, 28)
    x = Var("x", TensorType(xs, F32))
    y = get_op("nn.relu")(get_op("nn.conv")(x, _w(16, 16, 3, 3), _w(16), pads=(1, 1, 1, 1)))
    with applying({"winograd.rows_per_tile_row": per_tile_row}):
        cm = _check([x], y, {"x": rng.standard_normal(xs).astype(np.float32)}, {"alter_op_layout.winograd": True})
    body = _input_transform(cm)
    assert (body.count("#pragma omp parallel") == 1) is per_tile_row
    assert ("kiln_alloc" in body) is not per_tile_row


@pytest.mark.parametrize("side, outer", [(7, True), (9, False)])
def test_input_transform_writes_aliased_positions_one_at_a_time(side, outer):
    """8 channel blocks of 4 x 4 tiles (a 7x7 map in F(2x2)) put the 16 positions 4 KB apart, in one L1 set:
    the transform then writes each position's run of tiles in a loop of its own; 5 x 5 tiles (9x9) keep one
    loop over the tile columns outside the positions."""
    xs = (1, 64, side, side)
    x = Var("x", TensorType(xs, F32))
    y = get_op("nn.relu")(get_op("nn.conv")(x, _w(64, 64, 3, 3), _w(64), pads=(1, 1, 1, 1)))
    cm = _check([x], y, {"x": rng.standard_normal(xs).astype(np.float32)},
                {"alter_op_layout.winograd": True, "alter_op_layout.winograd_tile": 2})
    tiles = (side + 1) // 2
    loops = len(re.findall(rf"for \(int64_t u\w* = 0LL; u\w* < {tiles}LL", _input_transform(cm)))
    assert loops == (1 + 16 if outer else 2)  # the row sums' loop, then the positions' (or one)
