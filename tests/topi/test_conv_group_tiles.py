"""The blocked conv schedule of a grouped conv (Winograd's batched products, ResNeXt): output blocks split by
group first, so a register tile's blocks lie in one group and share its input loads; groups outermost. Checked
against the interpreter for tiles that divide a group's blocks, that do not (guarded), both loop orders, and
for the shared loads in the generated C."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

import kiln
from kiln.codegen.c_source import generate
from kiln.compiler.fuse import fuse
from kiln.compiler.lower import build_graph_executor as build
from kiln.compiler.lower import lower_groups
from kiln.ir import Constant, Function, IRModule, TensorType, Var
from kiln.op import get_op
from kiln.op.layout import Conv2dNCHWcAttrs
from kiln.topi.knobs import applying
from kiln.transform import PassContext
from kiln.transform.layout_rules import transform

# every group is lowered afresh (tests/topi/conftest.py: a kernel-cache hit skips the schedule)
pytestmark = [pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed"),
              pytest.mark.usefixtures("fresh_cache")]
F32 = "float32"
rng = np.random.default_rng(3)


def _blocked_grouped(xs, ws, group, blk, **attrs):
    """relu(conv2d_nchwc(x)) with `group` groups of whole `blk`-channel blocks, NCHW in and out."""
    x = Var("x", TensorType(xs, F32))
    data, kernel = f"NCHW{blk}c", f"OIHW{blk}i{blk}o"
    w = transform(Constant(rng.standard_normal(ws).astype(np.float32)), "OIHW", kernel)
    b = transform(Constant(rng.standard_normal(ws[0]).astype(np.float32)), "C", f"C{blk}c")
    y = get_op("nn.conv2d_nchwc")(transform(x, "NCHW", data), w, b,
                                  attrs=Conv2dNCHWcAttrs(data, kernel, group=group, **attrs))
    body = transform(get_op("nn.relu")(y), f"NCHW{blk}c", "NCHW")
    return IRModule({"main": Function((x,), body)}), {"x": rng.standard_normal(xs).astype(np.float32)}


CASES = [  # (x shape, w shape, groups, block, attrs)
    ((1, 128, 7, 7), (128, 32, 1, 1), 4, 8, {}),  # Winograd's product: 4 blocks a group, one 4 x 7 tile
    ((1, 96, 5, 11), (96, 32, 1, 1), 3, 8, {}),  # 4 blocks a group, guarded column tiles
    ((1, 72, 6, 9), (120, 24, 1, 1), 3, 8, {}),  # 5 output blocks a group: the tile does not divide it
    ((1, 64, 9, 9), (64, 16, 3, 3), 4, 8, dict(pads=(1, 1, 1, 1))),  # ResNeXt-like 3x3, 2 blocks a group
    ((2, 48, 8, 8), (48, 8, 3, 3), 6, 8, dict(strides=(2, 2), pads=(1, 1, 1, 1))),  # 1 block a group, batch 2
]


@pytest.mark.parametrize("xs, ws, group, blk, attrs", CASES)
@pytest.mark.parametrize("config", [{}, {"conv.rows_outer": True}, {"conv.oc_tile": 3}, {"conv.oc_tile": 8}])
def test_grouped_tiles_match_the_interpreter(xs, ws, group, blk, attrs, config):
    mod, feeds = _blocked_grouped(xs, ws, group, blk, **attrs)
    with applying(config):
        cm = build(mod, 2, PassContext(2))
    np.testing.assert_allclose(cm.run(feeds)[0], kiln.evaluate(mod, feeds)[0], rtol=1e-4, atol=1e-4)
    assert not cm.host_groups and not cm.ran_on_host


def test_a_tile_of_one_group_loads_each_input_once():
    """4 output blocks x 7 columns in one group: 7 distinct input loads, not one per block (28)."""
    mod, _ = _blocked_grouped((1, 128, 7, 7), (128, 32, 1, 1), 4, 8)
    kernels, _, _ = lower_groups(fuse(mod, 2))
    conv = [k.func for k in kernels if "conv_acc" in generate([k.func]).code]
    assert len(conv) == 1
    code = generate(conv).code
    body = code[code.index("conv_acc[mc] = "):]
    loads = set(re.findall(r"p0\[[^\]]*\]", body[:body.index("return")]))
    assert len(loads) == 7
