"""AlterOpLayout's Winograd rule: which 3x3 convs become winograd_input -> grouped 1x1 conv ->
winograd_output (the "auto" rule, the config switch, what is never eligible), and that the rewritten
graph means the same under the interpreter (the operators' numpy references)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.ir import Constant, Function, IRModule, TensorType, Var
from kiln.ir.expr import Call
from kiln.op import get_op
from kiln.transform.layout import alter_op_layout
from tests.transform.golden import run_pass

F32 = "float32"
rng = np.random.default_rng(0)


def _conv_module(c: int, k: int, hw: tuple[int, int], const_weight: bool = True, dtype: str = F32, **attrs):
    x = Var("x", TensorType((1, c, *hw), dtype))
    params = [x]
    if const_weight:
        w = Constant(rng.standard_normal((k, c // attrs.get("group", 1), 3, 3)).astype(dtype))
    else:
        w = Var("w", TensorType((k, c, 3, 3), dtype))
        params.append(w)
    y = get_op("nn.conv")(x, w, Constant(rng.standard_normal(k).astype(dtype)), **attrs)
    return IRModule({"main": Function(tuple(params), get_op("nn.relu")(y))})


def _calls(mod: IRModule, name: str) -> list[Call]:
    return [e for e in kiln.ir.post_order(mod.main) if isinstance(e, Call) and getattr(e.op, "name", "") == name]


def _tile(mod: IRModule) -> int | None:
    calls = _calls(mod, "nn.winograd_input")
    return calls[0].attrs.tile if calls else None


@pytest.mark.parametrize("c, hw, tile", [
    (64, (56, 56), 4),  # resnet layer 1: F(4x4)
    (128, (28, 28), 4),
    (256, (14, 14), 2),  # 14 does not divide into 4-tiles: F(2x2)
    (512, (7, 7), 2),  # resnet's last stage: F(2x2), the last tile cropped
    (16, (30, 30), 2),  # 30 is not a multiple of 4: F(2x2), not a cropped F(4x4)
    (16, (13, 13), 2),  # odd: a cropped F(2x2) tile
    (64, (27, 28), 2),  # one side below 28
    (64, (6, 6), None),  # below 7x7: direct
])
def test_auto_rule(c: int, hw: tuple[int, int], tile: int | None):
    out = run_pass(alter_op_layout, _conv_module(c, c, hw, pads=(1, 1, 1, 1)))
    assert _tile(out) == tile
    if tile is not None:
        (gemm,) = _calls(out, "nn.conv2d_nchwc")
        assert gemm.attrs.group == (tile + 2) ** 2 and gemm.args[1].type.shape[2:4] == (1, 1)


@pytest.mark.parametrize("attrs", [dict(strides=(2, 2), pads=(1, 1, 1, 1)), dict(dilations=(2, 2), pads=(2, 2, 2, 2)),
                                   dict(group=2, pads=(1, 1, 1, 1))])
def test_not_eligible(attrs):
    out = run_pass(alter_op_layout, _conv_module(16, 16, (28, 28), **attrs), config={"alter_op_layout.winograd": True})
    assert _tile(out) is None


def test_weight_must_be_constant_and_float32():
    assert _tile(run_pass(alter_op_layout, _conv_module(16, 16, (28, 28), const_weight=False, pads=(1, 1, 1, 1)),
                          config={"alter_op_layout.winograd": True})) is None
    assert _tile(run_pass(alter_op_layout, _conv_module(16, 16, (28, 28), dtype="float64", pads=(1, 1, 1, 1)),
                          config={"alter_op_layout.winograd": True})) is None


def test_config_switch():
    mod = _conv_module(16, 16, (28, 28), pads=(1, 1, 1, 1))
    assert _tile(run_pass(alter_op_layout, mod, config={"alter_op_layout.winograd": False})) is None
    assert _tile(run_pass(alter_op_layout, mod)) == 4  # "auto" is the default
    forced = run_pass(alter_op_layout, _conv_module(16, 16, (7, 5), pads=(1, 1, 1, 1)),
                      config={"alter_op_layout.winograd": True, "alter_op_layout.winograd_tile": 2})
    assert _tile(forced) == 2


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("c, k, hw, pads", [(8, 16, (9, 7), (1, 1, 1, 1)), (4, 4, (5, 6), (0, 2, 1, 0)),
                                             (8, 8, (3, 3), (0, 0, 0, 0)), (12, 8, (1, 2), (1, 1, 1, 1))])
def test_rewrite_keeps_meaning(m: int, c: int, k: int, hw: tuple[int, int], pads):
    mod = _conv_module(c, k, hw, pads=pads)
    out = run_pass(alter_op_layout, mod, config={"alter_op_layout.winograd": True, "alter_op_layout.winograd_tile": m,
                                                 "alter_op_layout.pad_channels": False})  # 12 channels: blocks of 6
    assert _tile(out) == m
    feeds = {"x": rng.standard_normal((1, c, *hw)).astype(np.float32)}
    (want,), (got,) = kiln.evaluate(mod, feeds), kiln.evaluate(out, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def _with_weight(mod: IRModule, w: np.ndarray) -> IRModule:
    conv = _calls(mod, "nn.conv")[0]
    new = get_op("nn.conv")(conv.args[0], Constant(w), conv.args[2], attrs=conv.attrs)
    return IRModule({"main": Function(mod.main.params, get_op("nn.relu")(new))})


@pytest.mark.parametrize("outlier", [1e12, np.inf, np.nan])
def test_a_weight_with_an_extreme_outlier_stays_a_direct_conv(outlier: float):
    """An outlier's rounding in Winograd's tile sums lands where the direct conv reads zero padding (the fuzzer's
    byte-flipped weights turned a softmax one-hot): such weights keep the direct conv."""
    mod = _conv_module(64, 64, (56, 56), pads=(1, 1, 1, 1))
    w = rng.standard_normal((64, 64, 3, 3)).astype(F32)
    assert _tile(run_pass(alter_op_layout, _with_weight(mod, w))) == 4
    w[3, 5, 1, 2] = outlier
    assert _tile(run_pass(alter_op_layout, _with_weight(mod, w))) is None


def test_winograd_safe_looks_at_the_typical_nonzero_magnitude():
    from kiln.op.winograd import WINOGRAD_MAX_SPREAD, winograd_safe

    w = rng.standard_normal((32, 32, 3, 3))
    assert winograd_safe(w) and winograd_safe(np.zeros((4, 4, 3, 3)))
    pruned = np.where(rng.random(w.shape) < 0.9, 0.0, w)  # 90% zeros: the median of the nonzero ones counts
    assert winograd_safe(pruned)
    w[0, 0, 0, 0] = 2 * WINOGRAD_MAX_SPREAD * np.median(np.abs(w))
    assert not winograd_safe(w)
