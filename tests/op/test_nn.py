"""Convolutions, pooling, unpooling and dropout: references against onnxruntime (through the ONNX
frontend, so converters and inferred types are checked too), self-consistency where ORT has no
kernel (DeformConv), and type relations with symbolic dims and bad inputs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from kiln.errors import TypeInferenceError
from kiln.frontend.onnx import from_onnx
from kiln.ir import dtype as dt
from kiln.ir.expr import Constant, Var
from kiln.ir.types import ANY, SizeVar, TensorType, TupleType
from kiln.op import get_op
from kiln.op.interpreter import evaluate
from kiln.op.nn import AveragePoolAttrs, ConvAttrs, DeformConvAttrs, DropoutAttrs, MaxPoolAttrs, MaxUnpoolAttrs

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(0)
N, H, W = SizeVar("N"), SizeVar("H"), SizeVar("W")
TOL = {"float16": 2e-2, "float32": 1e-4, "float64": 1e-4}


def rand(*shape, dtype="float32") -> np.ndarray:
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        return RNG.integers(max(info.min, -20), min(info.max, 20), size=shape).astype(dtype)
    return RNG.uniform(-2, 2, size=shape).astype(dtype)


def check_vs_ort(op_type: str, inputs: list, attrs: dict, n_out: int = 1, opset: int = 22,
                 outputs: list | None = None) -> list:
    """Run a one-node model in Kiln and onnxruntime; also compare Kiln's inferred output types.
    ORT lacks float64 kernels for most of these ops: those run in ORT as float32."""
    names = [f"in{i}" if v is not None else "" for i, v in enumerate(inputs)]
    feeds = {n: v for n, v in zip(names, inputs) if n}
    node = helper.make_node(op_type, names, [f"out{i}" for i in range(n_out)], **attrs)
    ins = [(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for n, v in feeds.items()]
    m = one_node_model(node, ins, opset, outputs=outputs)
    mod = from_onnx(m)
    got = evaluate(mod, feeds)
    want = _ort_run(m, feeds)
    tol = TOL.get(str(inputs[0].dtype), 0)
    for g, w, t in zip(got, want, mod.main.body.type.fields):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        assert t == TensorType(g.shape, dt.from_numpy(g.dtype))
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=tol, atol=tol)
    return got


def one_node_model(node, inputs: list, opset: int, inits=(), outputs=None) -> onnx.ModelProto:
    """A model of one node; inputs/outputs are (name, elem_type, shape); by default output types
    are inferred."""
    ins = [helper.make_tensor_value_info(*i) for i in inputs]
    outs = ([helper.make_tensor_value_info(*o) for o in outputs] if outputs
            else [onnx.ValueInfoProto(name=o) for o in node.output])
    m = helper.make_model(helper.make_graph([node], "t", ins, outs, list(inits)),
                          opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    return onnx.shape_inference.infer_shapes(m)


def _ort_run(m: onnx.ModelProto, feeds: dict) -> list:
    wide = {n: v for n, v in feeds.items() if v.dtype == np.float64}
    if wide:
        m = onnx.ModelProto.FromString(m.SerializeToString())
        for vi in list(m.graph.input) + list(m.graph.output):
            if vi.type.tensor_type.elem_type == onnx.TensorProto.DOUBLE:
                vi.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
        feeds = {n: v.astype(np.float32) if n in wide else v for n, v in feeds.items()}
    out = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    return [o.astype(np.float64) if wide and o.dtype == np.float32 else o for o in out]


def infer(op: str, *types, **attrs):
    """Output type of `op` on inputs of the given types (a numpy array stands for a Constant)."""
    args = [Constant(t) if isinstance(t, np.ndarray) else Var(f"x{i}", t) for i, t in enumerate(types)]
    return get_op(op)(*args, **attrs).type


def f32(*shape) -> TensorType:
    return TensorType(shape, "float32")


# ---------------------------------------------------------------------------------------------
# convolution

CONV_CASES = [  # x shape, w shape, attrs
    ((1, 3, 7, 7), (5, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 4, 11, 5), (6, 2, 3, 2), {"group": 2, "strides": [2, 1], "pads": [1, 0, 2, 1]}),
    ((1, 6, 13, 13), (6, 1, 3, 3), {"group": 6, "dilations": [2, 3], "pads": [2, 3, 2, 3]}),
    ((1, 2, 17), (3, 2, 5), {"strides": [3], "auto_pad": "SAME_UPPER"}),
    ((3, 1, 5, 7), (1, 1, 1, 1), {}),
    ((1, 2, 5, 6, 7), (4, 2, 3, 2, 3), {"strides": [2, 1, 2], "auto_pad": "SAME_LOWER"}),
    ((1, 3, 9, 10), (2, 3, 4, 3), {"auto_pad": "VALID", "strides": [2, 3]}),
]


@pytest.mark.parametrize("xs, ws, attrs", CONV_CASES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_conv_vs_ort(xs, ws, attrs, dtype):
    check_vs_ort("Conv", [rand(*xs, dtype=dtype), rand(*ws, dtype=dtype), rand(ws[0], dtype=dtype)], attrs)
    check_vs_ort("Conv", [rand(*xs, dtype=dtype), rand(*ws, dtype=dtype)], attrs)


def test_conv_float16():
    check_vs_ort("Conv", [rand(1, 4, 6, 6, dtype="float16"), rand(2, 4, 3, 3, dtype="float16")],
                 {"pads": [1, 1, 1, 1]})


def test_conv_integer_vs_ort():
    x, w = rand(1, 3, 7, 5, dtype="uint8"), rand(4, 3, 3, 3, dtype="uint8")
    check_vs_ort("ConvInteger", [x, w, np.array(3, np.uint8), np.array(5, np.uint8)],
                 {"pads": [1, 1, 1, 1]}, opset=10)
    check_vs_ort("ConvInteger", [x, w], {"strides": [2, 2]}, opset=10)


CONVT_CASES = [
    ((1, 2, 3, 3), (2, 3, 3, 3), {}),
    ((2, 4, 5, 3), (4, 1, 2, 3), {"group": 2, "strides": [2, 3], "pads": [1, 0, 0, 2]}),
    ((1, 2, 7), (2, 2, 3), {"strides": [2], "output_padding": [1], "dilations": [2]}),
    ((1, 1, 3, 4), (1, 2, 3, 3), {"strides": [3, 2], "output_shape": [10, 8]}),
    ((1, 1, 2, 3, 2), (1, 2, 2, 2, 2), {"strides": [2, 1, 2]}),
]


@pytest.mark.parametrize("xs, ws, attrs", CONVT_CASES)
def test_conv_transpose_vs_ort(xs, ws, attrs):
    m = ws[1] * attrs.get("group", 1)
    check_vs_ort("ConvTranspose", [rand(*xs), rand(*ws), rand(m)], attrs)


def test_conv_transpose_inverts_conv_shape():
    """ConvTranspose with the same geometry maps a conv's output shape back to its input shape."""
    t = infer("nn.conv_transpose", f32(1, 4, 8, 8), f32(4, 3, 3, 3), strides=(2, 2), pads=(1, 1, 1, 1),
              output_padding=(1, 1))
    assert t == f32(1, 3, 16, 16)


def test_conv_types_symbolic():
    assert infer("nn.conv", f32(N, 3, H, W), f32(8, 3, 3, 3), pads=(1, 1, 1, 1)) == f32(N, 8, H, W)
    assert infer("nn.conv", f32(N, 3, H, W), f32(8, 3, 3, 3), strides=(2, 2)) == f32(N, 8, ANY, ANY)
    assert infer("nn.conv", f32(N, 3, H, 9), f32(8, 3, 1, 1), auto_pad="SAME_UPPER",
                 strides=(1, 2)) == f32(N, 8, H, 5)
    assert infer("nn.conv", TensorType(None, "float32"), f32(8, 3, 3, 3)) == f32(ANY, 8, ANY, ANY)
    assert infer("nn.conv", f32(1, 3, 5, 5), f32(8, 3, H, W)) == f32(1, 8, ANY, ANY)
    assert infer("nn.conv_transpose", f32(N, 3, H, W), f32(3, 2, 3, 3), pads=(1, 1, 1, 1)) == f32(N, 2, H, W)


@pytest.mark.parametrize("xt, wt, attrs, msg", [
    (f32(1, 4, 5, 5), f32(2, 3, 3, 3), {}, "channels"),
    (f32(1, 4, 5, 5), f32(3, 2, 3, 3), {"group": 2}, "divisible"),
    (f32(1, 3, 5, 5), f32(2, 3, 3, 3), {"auto_pad": "SAME"}, "auto_pad"),
    (f32(1, 3, 5, 5), f32(2, 3, 3, 3), {"kernel_shape": (2, 2)}, "kernel_shape"),
    (f32(1, 3, 5, 5), f32(2, 3, 3, 3), {"strides": (1,)}, "strides"),
    (f32(1, 3, 2, 2), f32(2, 3, 3, 3), {}, "does not fit"),
    (TensorType((1, 3, 5, 5), "int32"), TensorType((2, 3, 3, 3), "int32"), {}, "dtype"),
    (f32(1, 3, 5, 5), TensorType((2, 3, 3, 3), "float64"), {}, "share"),
    (f32(3, 5), f32(2, 3, 3), {}, "rank"),
])
def test_conv_type_errors(xt, wt, attrs, msg):
    with pytest.raises(TypeInferenceError, match=msg):
        infer("nn.conv", xt, wt, **attrs)


def test_conv_bias_shape_error():
    with pytest.raises(TypeInferenceError, match="bias"):
        infer("nn.conv", f32(1, 3, 5, 5), f32(2, 3, 3, 3), f32(3))


# ---------------------------------------------------------------------------------------------
# deformable convolution (ORT has no CPU kernel: checked against nn.conv)


def _deform(x, w, offset, mask=None, **attrs):
    return get_op("nn.deform_conv").reference(DeformConvAttrs(**attrs), x, w, offset, None, mask)


def test_deform_conv_zero_offset_is_conv():
    x, w = rand(2, 4, 7, 6), rand(6, 2, 3, 2)
    attrs = {"group": 2, "strides": (2, 1), "pads": (1, 0, 1, 1), "dilations": (1, 2)}
    want = get_op("nn.conv").reference(ConvAttrs(**attrs), x, w)
    offset = np.zeros((2, 2 * 3 * 2 * 2) + want.shape[2:], np.float32)
    np.testing.assert_allclose(_deform(x, w, offset, offset_group=2, **attrs), want, rtol=1e-5, atol=1e-5)


def test_deform_conv_integer_and_half_offsets():
    """Offset +1 on every tap samples the shifted input; +0.5 averages two neighbours; mask scales."""
    x, w = rand(1, 2, 6, 6), rand(3, 2, 2, 2)
    conv = get_op("nn.conv").reference
    shifted = np.zeros_like(x)
    shifted[..., :, :-1] = x[..., :, 1:]
    off = np.zeros((1, 2 * 2 * 2, 5, 5), np.float32)
    off[:, 1::2] = 1.0  # x-offsets
    np.testing.assert_allclose(_deform(x, w, off), conv(ConvAttrs(), shifted, w), rtol=1e-5, atol=1e-5)
    mask = np.full((1, 4, 5, 5), 0.5, np.float32)
    np.testing.assert_allclose(_deform(x, w, off * 0.5, mask),
                               0.25 * (conv(ConvAttrs(), x, w) + conv(ConvAttrs(), shifted, w)),
                               rtol=1e-5, atol=1e-5)


def test_deform_conv_type():
    assert infer("nn.deform_conv", f32(N, 4, 9, 9), f32(2, 4, 3, 3), f32(N, 18, 7, 7)) == f32(N, 2, 7, 7)
    with pytest.raises(TypeInferenceError, match="offset_group"):
        infer("nn.deform_conv", f32(1, 3, 9, 9), f32(2, 3, 3, 3), f32(1, 36, 7, 7), offset_group=2)


# ---------------------------------------------------------------------------------------------
# pooling

POOL_CASES = [
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 2], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [2, 3], "dilations": [2, 1], "pads": [1, 0, 0, 2], "ceil_mode": 1, "strides": [3, 2]},
    {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]},
    {"kernel_shape": [3, 3], "auto_pad": "SAME_LOWER"},
    {"kernel_shape": [1, 1], "strides": [2, 2], "ceil_mode": 1},
]


@pytest.mark.parametrize("attrs", POOL_CASES)
def test_max_pool_vs_ort(attrs):
    check_vs_ort("MaxPool", [rand(2, 3, 7, 11)], attrs, n_out=2)
    check_vs_ort("MaxPool", [rand(1, 2, 5, 13)], dict(attrs, storage_order=1), n_out=2)


@pytest.mark.parametrize("dtype", ["float16", "float64", "int8", "uint8"])
def test_max_pool_dtypes(dtype):
    check_vs_ort("MaxPool", [rand(1, 2, 6, 5, dtype=dtype)], {"kernel_shape": [2, 2], "pads": [1, 1, 0, 0]})


def test_max_pool_1d_3d():
    check_vs_ort("MaxPool", [rand(2, 3, 11)], {"kernel_shape": [3], "strides": [2]}, n_out=2)
    check_vs_ort("MaxPool", [rand(1, 2, 5, 4, 7)], {"kernel_shape": [2, 3, 2], "pads": [1, 1, 0, 0, 1, 1]},
                 n_out=2)


@pytest.mark.parametrize("attrs", POOL_CASES)
@pytest.mark.parametrize("include", [0, 1])
def test_average_pool_vs_ort(attrs, include):
    check_vs_ort("AveragePool", [rand(2, 3, 7, 11)], dict(attrs, count_include_pad=include))


@pytest.mark.parametrize("attrs", POOL_CASES[:2] + POOL_CASES[3:4])
def test_lp_pool_vs_ort(attrs):
    for p in (1, 2, 3):
        check_vs_ort("LpPool", [rand(1, 3, 7, 6)], dict(attrs, p=p))


@pytest.mark.parametrize("op_type", ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"])
def test_global_pools_vs_ort(op_type):
    for shape in [(2, 3, 5, 7), (1, 1, 1), (2, 2, 3, 1, 2)]:
        check_vs_ort(op_type, [rand(*shape)], {}, opset=2 if op_type == "GlobalLpPool" else 22)


def test_pool_types():
    y = f32(N, 3, ANY, ANY)
    assert infer("nn.max_pool", f32(N, 3, H, W), kernel_shape=(3, 3), strides=(2, 2)) == \
        TupleType((y, TensorType(y.shape, "int64")))
    assert infer("nn.average_pool", f32(N, 3, H, 8), kernel_shape=(3, 3), pads=(1, 1, 1, 1)) == f32(N, 3, H, 8)
    assert infer("nn.lp_pool", TensorType(None, "float32"), kernel_shape=(2,)) == f32(ANY, ANY, ANY)
    assert infer("nn.global_average_pool", f32(N, 3, H, W)) == f32(N, 3, 1, 1)
    with pytest.raises(TypeInferenceError, match="rank 4"):
        infer("nn.max_pool", f32(1, 3, 5), kernel_shape=(2, 2))
    with pytest.raises(TypeInferenceError, match="dtype"):
        infer("nn.average_pool", TensorType((1, 3, 5, 5), "int8"), kernel_shape=(2, 2))
    with pytest.raises(TypeInferenceError, match="positive"):
        infer("nn.max_pool", f32(1, 3, 5, 5), kernel_shape=(2, 0))


def test_max_unpool_inverts_max_pool():
    x = rand(2, 3, 6, 8) + 3  # positive: unpooled zeros never win the re-pool
    attrs = MaxPoolAttrs(kernel_shape=(2, 2), strides=(2, 2))
    y, idx = get_op("nn.max_pool").reference(attrs, x)
    unpooled = get_op("nn.max_unpool").reference(MaxUnpoolAttrs(kernel_shape=(2, 2), strides=(2, 2)), y, idx)
    assert unpooled.shape == x.shape
    np.testing.assert_array_equal(get_op("nn.max_pool").reference(attrs, unpooled)[0], y)
    np.testing.assert_array_equal(unpooled[unpooled != 0], x[unpooled != 0])
    grown = get_op("nn.max_unpool").reference(MaxUnpoolAttrs(kernel_shape=(2, 2), strides=(2, 2)), y, idx,
                                              np.array([2, 3, 7, 9]))
    np.testing.assert_array_equal(grown[:, :, :6, :8], unpooled)
    assert not grown[:, :, 6:].any() and not grown[..., 8:].any()


def test_max_unpool_types():
    i64 = TensorType((N, 3, H, 4), "int64")
    assert infer("nn.max_unpool", f32(N, 3, H, 4), i64, kernel_shape=(2, 2), strides=(2, 2)) == \
        f32(N, 3, ANY, 8)
    assert infer("nn.max_unpool", f32(N, 3, H, 4), i64, np.array([1, 3, 9, 9]), kernel_shape=(2, 2)) == \
        f32(1, 3, 9, 9)
    assert infer("nn.max_unpool", f32(N, 3, H, 4), i64, TensorType((4,), "int64"),
                 kernel_shape=(2, 2)) == f32(ANY, ANY, ANY, ANY)


# ---------------------------------------------------------------------------------------------
# dropout


def test_dropout_inference_is_identity():
    x = rand(3, 5)
    y, mask = get_op("nn.dropout").reference(DropoutAttrs(), x, np.float32(0.3), np.bool_(False))
    np.testing.assert_array_equal(y, x)
    assert mask.dtype == np.bool_ and mask.all()
    check_vs_ort("Dropout", [x, np.array(0.3, np.float32)], {}, n_out=2)


def test_dropout_training_seeded():
    x = rand(40, 50) + 5  # no zeros, so dropped elements are visible
    ref = get_op("nn.dropout").reference
    y, mask = ref(DropoutAttrs(seed=3), x, np.float32(0.25), np.bool_(True))
    y2, mask2 = ref(DropoutAttrs(seed=3), x, np.float32(0.25), np.bool_(True))
    np.testing.assert_array_equal(y, y2)
    np.testing.assert_array_equal(mask, mask2)
    assert 0.2 < 1 - mask.mean() < 0.3
    np.testing.assert_allclose(y[mask], x[mask] / 0.75, rtol=1e-6)
    assert not y[~mask].any()
    assert not ref(DropoutAttrs(seed=1), x, np.float32(1.0), np.bool_(True))[0].any()


def test_dropout_types_and_old_opsets():
    assert infer("nn.dropout", f32(N, 4)) == TupleType((f32(N, 4), TensorType((N, 4), "bool")))
    with pytest.raises(TypeInferenceError, match="ratio"):
        infer("nn.dropout", f32(2), np.array(1.5, np.float32))
    x = rand(2, 3)
    node = helper.make_node("Dropout", ["x"], ["y", "m"], ratio=0.4)
    for opset, mask_dtype in [(7, np.float32), (10, np.bool_)]:
        mask_type = helper.np_dtype_to_tensor_dtype(np.dtype(mask_dtype))
        m = one_node_model(node, [("x", onnx.TensorProto.FLOAT, [2, 3])], opset,
                           outputs=[("y", onnx.TensorProto.FLOAT, [2, 3]), ("m", mask_type, [2, 3])])
        y, mask = evaluate(from_onnx(m), {"x": x})
        np.testing.assert_array_equal(y, x)
        assert mask.dtype == mask_dtype and mask.all()


def test_conv_from_initializer_weights():
    """Weights as initializers (Constants) take the same path as graph inputs."""
    x, w = rand(1, 2, 5, 5), rand(3, 2, 3, 3)
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    m = one_node_model(node, [("x", onnx.TensorProto.FLOAT, ["N", 2, 5, 5])], 22,
                       [numpy_helper.from_array(w, "w")])
    mod = from_onnx(m)
    assert mod.main.body.type.fields[0] == f32(N, 3, 5, 5)
    np.testing.assert_allclose(evaluate(mod, {"x": x})[0],
                               get_op("nn.conv").reference(ConvAttrs(pads=(1, 1, 1, 1)), x, w), rtol=1e-6)


def test_average_pool_attrs_dataclass():
    a = AveragePoolAttrs(kernel_shape=(2, 2))
    assert a.count_include_pad == 0 and a.ceil_mode == 0 and a.auto_pad == "NOTSET"
