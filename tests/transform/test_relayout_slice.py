"""alter-op-layout carries a Slice through the blocked layout when its window is whole channel blocks
(a gate over a conv's two halves, a 2-D or a 1-D conv): no transforms around it, and the same values
as the plain slice (interpreter and compiled). Windows inside a block, or into padded channels, go
back to the plain layout first."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

import kiln
from kiln.compiler.fuse import fuse
from kiln.compiler.lower import build_graph_executor as build
from kiln.ir.expr import Call
from kiln.ir.visitor import post_order
from tests.helpers import F, model

RNG = np.random.default_rng(0)


def _gate(c: int, cut: tuple[int, int, int], spatial=None, one_d: bool = False):
    """conv (c channels) -> slices [0, cut0) and [cut1, cut2) -> tanh(a) * sigmoid(b) -> conv."""
    k = [3] if one_d else [3, 3]
    w1 = numpy_helper.from_array(RNG.standard_normal((c, 5, *k)).astype(np.float32), "w1")
    half = cut[0]
    w2 = numpy_helper.from_array(RNG.standard_normal((8, half, *k)).astype(np.float32), "w2")
    const = lambda name, v: numpy_helper.from_array(np.asarray(v, np.int64), name)  # noqa: E731
    inits = [w1, w2, const("s0", [0]), const("e0", [cut[0]]), const("s1", [cut[1]]), const("e1", [cut[2]]),
             const("ax", [1])]
    pads = [1, 1] if one_d else [1, 1, 1, 1]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=pads),
             helper.make_node("Slice", ["a", "s0", "e0", "ax"], ["p"]),
             helper.make_node("Slice", ["a", "s1", "e1", "ax"], ["q"])]
    if spatial is not None:  # a window over the last axis too, with a step
        inits += [const("ss", [0, spatial[0]]), const("se", [c, spatial[1]]), const("sa", [1, -1]),
                  const("st", [1, spatial[2]])]
        nodes.append(helper.make_node("Slice", ["a", "ss", "se", "sa", "st"], ["r"]))
    nodes += [helper.make_node("Tanh", ["p"], ["tp"]), helper.make_node("Sigmoid", ["q"], ["sq"]),
              helper.make_node("Mul", ["tp", "sq"], ["g"]),
              helper.make_node("Conv", ["g", "w2"], ["y"], pads=pads)]
    outs = [("y", F, ["n", "c", "h", "w"][:3 if one_d else 4])]
    outs += [("r", F, ["n", "c", "h", "w"][:3 if one_d else 4])] if spatial is not None else []
    shape = [1, 5, 23] if one_d else [1, 5, 9, 11]
    return model(nodes, [("x", F, shape)], outs, inits), shape


def _check(onnx_model, shape):
    mod = kiln.from_onnx(onnx_model)
    fused = fuse(mod, 3)
    x = RNG.standard_normal(shape).astype(np.float32)
    want = kiln.evaluate(mod, {"x": x})
    for got in (kiln.evaluate(fused, {"x": x}), build(mod, opt_level=3).run({"x": x})):
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    return [e for fn in fused.functions.values() for e in post_order(fn) if isinstance(e, Call)
            and getattr(e.op, "name", "") == "tensor.slice"]


@pytest.mark.parametrize("one_d", [False, True])
def test_gate_over_whole_blocks_stays_blocked(one_d):
    slices = _check(*_gate(32, (16, 16, 32), one_d=one_d))
    assert len(slices) == 2 and all(s.args[0].type.ndim == 5 for s in slices)  # sliced blocked: NCHW8c


def test_spatial_window_with_a_step_stays_blocked():
    slices = _check(*_gate(32, (16, 16, 32), spatial=(2, -1, 3)))
    assert len(slices) == 3 and all(s.args[0].type.ndim == 5 for s in slices)


@pytest.mark.parametrize("c, cut", [(32, (12, 12, 24)), (20, (12, 8, 20)), (24, (8, 13, 21))])
def test_windows_inside_blocks_or_padding_go_plain(c, cut):
    """12 is inside a block; 20 channels are padded to 24, so [8, 20) would end in the padding."""
    slices = _check(*_gate(c, cut))
    assert slices and all(s.args[0].type.ndim == 4 for s in slices if s.args[0].type.shape[1] in (c,))
