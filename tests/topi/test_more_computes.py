"""Computes for resize, einsum, linear (de)quantization, center_crop_pad, tensor_scatter and conv/pool
over a symbolic batch: against the references through kiln.te.eval on odd shapes, then compiled
end to end by the executor (no host groups) against kiln.evaluate."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.ir import Constant, Function, IRModule, Tuple, TupleGetItem, Var
from kiln.ir.dtype import from_numpy
from kiln.ir.types import SizeVar, TensorType
from kiln.op import get_op
from tests.codegen.conftest import requires_gcc
from tests.topi.harness import check

rng = np.random.default_rng(7)
MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
         "tf_half_pixel_for_nn", "tf_crop_and_resize")


def _f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def resize_attrs(**kw):
    return get_op("vision.resize").attrs_type(**kw)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("coord", MODES)
def test_resize_every_mode(mode, coord):
    x = _f32(1, 2, 5, 7)
    roi = np.array([0, 0, 0.1, 0.2, 1, 1, 0.9, 0.7], np.float32)
    scales = np.array([1, 1, 1.6, 0.6], np.float32)
    check("vision.resize", resize_attrs(mode=mode, coordinate_transformation_mode=coord),
          [x, roi, scales, None], const=(1, 2))


@pytest.mark.parametrize("nearest", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
def test_resize_nearest_modes_on_ints(nearest):
    x = rng.integers(-50, 50, size=(3, 5, 3)).astype(np.int32)
    sizes = np.array([7, 11], np.int64)
    attrs = resize_attrs(mode="nearest", nearest_mode=nearest, axes=(1, 2), coordinate_transformation_mode="asymmetric")
    check("vision.resize", attrs, [x, None, None, sizes], const=(3,))


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_antialias_exclude_outside_and_aspect(mode):
    x = (rng.random((2, 9, 13)) * 200).astype(np.uint8)
    attrs = resize_attrs(mode=mode, antialias=1, exclude_outside=1, axes=(1, 2),
                         keep_aspect_ratio_policy="not_larger")
    check("vision.resize", attrs, [x, None, None, np.array([4, 5], np.int64)], const=(3,))


@pytest.mark.parametrize("eq,shapes", [
    ("ij,jk->ik", [(3, 5), (5, 7)]),
    ("bij,bjk->bik", [(2, 3, 5), (2, 5, 1)]),
    ("ii->i", [(5, 5)]),
    ("ii", [(3, 3)]),
    ("ij->", [(3, 7)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (1, 4, 5)]),
    ("i,j->ij", [(3,), (5,)]),
    ("bhqd,bhkd->bhqk", [(1, 2, 3, 5), (1, 2, 7, 5)]),
    ("ij->ji", [(3, 7)]),
])
def test_einsum(eq, shapes):
    check("linalg.einsum", get_op("linalg.einsum").attrs_type(eq), [_f32(*s) for s in shapes])


def test_einsum_narrow_floats_and_ints():
    ein = get_op("linalg.einsum").attrs_type("ij,jk->ik")
    check("linalg.einsum", ein, [_f32(3, 5).astype(np.float16), _f32(5, 2).astype(np.float16)])
    a, b = (rng.integers(-9, 9, size=s).astype(np.int32) for s in ((3, 5), (5, 2)))
    check("linalg.einsum", ein, [a, b])


@pytest.mark.parametrize("out", ["uint8", "int8", "int16", "uint16"])
def test_quantize_linear(out):
    x = _f32(3, 5, 7) * 100
    q = get_op("quant.quantize_linear").attrs_type
    zp = np.array(3, out)
    check("quant.quantize_linear", q(), [x, np.array(0.7, np.float32), zp])
    check("quant.quantize_linear", q(axis=1), [x, (rng.random(5) + 0.3).astype(np.float32), np.full(5, 2, out)])
    check("quant.quantize_linear", q(axis=2, block_size=3, output_dtype=out),
          [x, (rng.random((3, 5, 3)) + 0.3).astype(np.float32), None])
    check("quant.quantize_linear", q(), [x.astype(np.float16), np.array(0.5, np.float16), zp])


def test_dequantize_linear():
    d = get_op("quant.dequantize_linear").attrs_type
    x = rng.integers(-100, 100, size=(2, 5, 3)).astype(np.int8)
    check("quant.dequantize_linear", d(), [x, np.array(0.25, np.float32), np.array(-3, np.int8)])
    check("quant.dequantize_linear", d(axis=1), [x, rng.random(5).astype(np.float32), np.arange(5).astype(np.int8)])
    check("quant.dequantize_linear", d(axis=1, block_size=2), [x, rng.random((2, 3, 3)).astype(np.float32), None])
    check("quant.dequantize_linear", d(), [x.astype(np.int32), np.array(0.5, np.float16)])


def test_center_crop_pad():
    x = _f32(4, 7, 6)
    attrs = get_op("tensor.center_crop_pad").attrs_type
    check("tensor.center_crop_pad", attrs(), [x, np.array([3, 10, 6], np.int64)], const=(1,))
    check("tensor.center_crop_pad", attrs(axes=(-1,)), [x, np.array([3], np.int64)], const=(1,))


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter(mode):
    cache, upd = _f32(3, 2, 7, 4), _f32(3, 2, 3, 4)
    starts = np.array([0, 4, 2], np.int64) if mode == "linear" else np.array([5, 6, 1], np.int64)
    attrs = get_op("tensor.tensor_scatter").attrs_type(axis=2, mode=mode)
    check("tensor.tensor_scatter", attrs, [cache, upd, starts])
    check("tensor.tensor_scatter", attrs, [cache, upd])


# ---------------------------------------------------------------------------------------------
# end to end: compiled by the executor, no host groups



def _var(name, a, symbolic=()):
    shape = tuple(SizeVar(f"{name}{k}") if k in symbolic else n for k, n in enumerate(a.shape))
    return Var(name, TensorType(shape, from_numpy(a.dtype)))


def _compiled_matches(mod, feeds_list, tol=1e-5):
    from kiln.compiler.lower import build_graph_executor as build

    cm = build(mod)
    assert cm.host_groups == [], cm.host_groups
    for feeds in feeds_list:
        want, got = kiln.evaluate(mod, feeds), cm.run(feeds)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=tol, atol=tol)


@requires_gcc
def test_compiled_conv_pool_with_symbolic_batch():
    x = _f32(2, 3, 9, 8)
    v = _var("x", x, symbolic=(0,))
    conv = get_op("nn.conv")(v, Constant(_f32(4, 3, 3, 3)), Constant(_f32(4)), strides=(2, 1), pads=(1, 0, 1, 2))
    pooled = TupleGetItem(get_op("nn.max_pool")(get_op("nn.relu")(conv), kernel_shape=(2, 2)), 0)
    avg = get_op("nn.average_pool")(pooled, kernel_shape=(2, 2), pads=(1, 1, 0, 0), count_include_pad=0)
    mod = IRModule({"main": Function((v,), get_op("nn.conv_transpose")(avg, Constant(_f32(4, 2, 2, 2))))})
    _compiled_matches(mod, [{"x": x}, {"x": _f32(5, 3, 9, 8)}], tol=1e-4)


@requires_gcc
def test_compiled_resize_einsum_quant_and_friends():
    x, w = _f32(2, 3, 5, 6), _f32(4, 6)
    vx = _var("x", x)
    # NOTE: sizes, not scales: FuseOps makes float constants of more than one element kernel parameters
    up = get_op("vision.resize")(vx, Constant(np.zeros(0, np.float32)), Constant(np.zeros(0, np.float32)),
                                 Constant(np.array([7, 4], np.int64)), mode="cubic", axes=(2, 3),
                                 coordinate_transformation_mode="align_corners")
    mm = get_op("linalg.einsum")(up, Constant(w), equation="bchw,wk->bchk")  # h: 5 -> 7, w: 6 -> 4
    q = get_op("quant.quantize_linear")(mm, Constant(np.array(0.05, np.float32)), Constant(np.array(5, np.int8)))
    dq = get_op("quant.dequantize_linear")(q, Constant(np.array(0.05, np.float32)), Constant(np.array(5, np.int8)))
    crop = get_op("tensor.center_crop_pad")(dq, Constant(np.array([4, 5], np.int64)), axes=(2, 3))
    ln = get_op("nn.layer_normalization")(crop, Constant(_f32(5)), axis=-1)
    ln0, ln1, ln2 = (TupleGetItem(ln, k) for k in range(3))
    outs = Tuple([get_op("tensor.tensor_scatter")(ln0, Constant(_f32(2, 3, 2, 5)), axis=2), ln1, ln2])
    mod = IRModule({"main": Function((vx,), outs)})
    _compiled_matches(mod, [{"x": x}], tol=1e-4)
