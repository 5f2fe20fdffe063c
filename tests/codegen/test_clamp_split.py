"""A fused clamp (Clip, relu6) is spelled as two simd loops, max then min in place (kiln/codegen/c_stmt.py
_clamp_halves): gcc folds the two selects of one loop into a mask expression several times slower. The
split must not change a bit: NaN propagates, infinities clamp, float16 (which a store rounds) keeps one loop."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln
from kiln.compiler.aot import build_aot
from kiln.transform import PassContext


def _clip_model(dtype: int, shape, lo: float, hi: float, conv: bool) -> onnx.ModelProto:
    np_dtype = helper.tensor_dtype_to_np_dtype(dtype)
    inits = [numpy_helper.from_array(np.array(lo, np_dtype), "lo"), numpy_helper.from_array(np.array(hi, np_dtype), "hi")]
    nodes = []
    if conv:
        c = shape[1]
        w = np.random.default_rng(0).standard_normal((c, 1, 3, 3)).astype(np_dtype)
        inits.append(numpy_helper.from_array(w, "w"))
        nodes.append(helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], group=c))
    else:
        inits.append(numpy_helper.from_array(np.array(0.5, np_dtype), "half"))
        nodes.append(helper.make_node("Add", ["x", "half"], ["c"]))
    nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["y"]))
    g = helper.make_graph(nodes, "clamp", [helper.make_tensor_value_info("x", dtype, shape)],
                          [helper.make_tensor_value_info("y", dtype, shape)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _source(model: onnx.ModelProto) -> str:
    return build_aot(kiln.from_onnx(model), 3, ctx=PassContext(3)).library.source.code


@pytest.mark.parametrize("conv", [False, True])
def test_clamp_is_two_loops_and_exact(conv):
    shape = [1, 32, 7, 11]
    model = _clip_model(TensorProto.FLOAT, shape, 0.0, 6.0, conv)
    code = _source(model)
    # the second loop reads back what the first stored and applies the upper bound
    assert "= kiln_min_f32(clip[" in code or "= kiln_min_f32(y[" in code
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(shape) * 8).astype(np.float32)
    flat = x.reshape(-1)
    flat[:6] = [np.nan, np.inf, -np.inf, 6.0, 0.0, -0.0]
    got = kiln.InferenceSession(kiln.build(kiln.from_onnx(model), opt_level=3)).run(None, {"x": x})[0]
    if conv:
        ref = kiln.InferenceSession(kiln.build(kiln.from_onnx(model), opt_level=0)).run(None, {"x": x})[0]
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5, equal_nan=True)
        assert np.array_equal(np.isnan(got), np.isnan(ref))
    else:
        c = x + np.float32(0.5)
        ref = np.where(np.isnan(c), c, np.minimum(np.maximum(c, 0), 6)).astype(np.float32)
        np.testing.assert_array_equal(got, ref)  # NaN in the same places, every other element exact


def test_float16_clamp_keeps_one_loop():
    shape = [1, 16, 5, 9]
    model = _clip_model(TensorProto.FLOAT16, shape, -1.0, 1.0, conv=False)
    code = _source(model)
    assert "kiln_min_f32(y[" not in code and "kiln_min_f32(clip[" not in code
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float16)
    got = kiln.InferenceSession(kiln.build(kiln.from_onnx(model), opt_level=3)).run(None, {"x": x})[0]
    ref = np.clip(x.astype(np.float32) + np.float32(0.5), -1, 1).astype(np.float16)
    np.testing.assert_array_equal(got, ref)
