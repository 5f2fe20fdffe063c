"""conv-transpose-to-conv: ConvTranspose as conv + depth_to_space + crop, checked against the direct
operator (the interpreter's reference) and ONNX Runtime, and compiled."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

import kiln
from kiln.compiler.lower import build_graph_executor as build
from kiln.ir.expr import Call
from kiln.ir.visitor import post_order
from kiln.transform import PASSES, PassContext
from kiln.transform.conv_transpose import phase_weight
from tests.helpers import F, model

RNG = np.random.default_rng(0)


def _model(c, m, hw, k, s, bias=True, **attrs):
    w = numpy_helper.from_array(RNG.standard_normal((c, m, *k)).astype(np.float32), "w")
    inits = [w] + ([numpy_helper.from_array(RNG.standard_normal(m).astype(np.float32), "b")] if bias else [])
    node = helper.make_node("ConvTranspose", ["x", "w"] + (["b"] if bias else []), ["y"], kernel_shape=list(k),
                            strides=[s, s], **attrs)
    return model([node], [("x", F, [1, c, *hw])], [("y", F, ["n", "m", "h", "w"])], inits, opset=17)


def _ops(mod) -> set[str]:
    return {e.op.name for f in mod.functions.values() for e in post_order(f) if isinstance(e, Call)
            and hasattr(e.op, "name")}


CASES = [
    dict(c=8, m=4, hw=(5, 6), k=(2, 2), s=2),  # the U-Net upsampler
    dict(c=3, m=5, hw=(4, 4), k=(3, 3), s=2, pads=[1, 1, 1, 1], output_padding=[1, 1]),  # K not a multiple of s
    dict(c=4, m=2, hw=(7, 3), k=(4, 4), s=2, pads=[1, 1, 1, 1]),  # DCGAN
    dict(c=2, m=3, hw=(3, 5), k=(3, 2), s=3, bias=False),
    dict(c=5, m=4, hw=(6, 6), k=(3, 3), s=1, pads=[1, 0, 1, 2]),
    dict(c=4, m=4, hw=(5, 5), k=(3, 3), s=2, auto_pad="SAME_UPPER"),
    dict(c=3, m=2, hw=(4, 5), k=(2, 2), s=2, output_shape=[7, 9]),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items() if k != "c"))
def test_rewrite_matches_the_direct_operator(case):
    onnx_model = _model(**case)
    mod = kiln.from_onnx(onnx_model)
    after = PASSES["conv-transpose-to-conv"](mod, PassContext(opt_level=2))
    assert "nn.conv_transpose" not in _ops(after) and "nn.conv" in _ops(after)
    x = RNG.standard_normal(mod.main.params[0].type.shape).astype(np.float32)
    want = kiln.evaluate(mod, {"x": x})[0]
    np.testing.assert_allclose(kiln.evaluate(after, {"x": x})[0], want, rtol=1e-5, atol=1e-5)
    got = build(kiln.from_onnx(onnx_model), opt_level=3).run({"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("attrs", [dict(dilations=[2, 2]), dict(group=2), dict(output_padding=[3, 3])])
def test_out_of_reach_forms_stay(attrs):
    s = 4 if "output_padding" in attrs else 2
    mod = kiln.from_onnx(_model(4, 2, (4, 4), (3, 3), s, bias="group" not in attrs, **attrs))
    after = PASSES["conv-transpose-to-conv"](mod, PassContext(opt_level=2))
    assert "nn.conv_transpose" in _ops(after)


def test_phase_weight_picks_each_phase_taps():
    w = np.arange(2 * 1 * 3 * 3, dtype=np.float32).reshape(2, 1, 3, 3)
    wp, t = phase_weight(w, 2)
    assert t == 2 and wp.shape == (4, 2, 2, 2)
    # phase (0, 0): taps 0 and 2 of each axis, flipped; phase (1, 1): tap 1 only (the padded tap 3 is zero)
    np.testing.assert_array_equal(wp[0, 0], [[w[0, 0, 2, 2], w[0, 0, 2, 0]], [w[0, 0, 0, 2], w[0, 0, 0, 0]]])
    np.testing.assert_array_equal(wp[3, 1], [[0, 0], [0, w[1, 0, 1, 1]]])
