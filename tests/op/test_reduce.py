"""Reductions, arg-reductions, scans, softmax family and losses: references against onnxruntime
and numpy, type relations with symbolic dims, and the older-opset forms the frontend normalizes."""

from __future__ import annotations

import ml_dtypes
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
from kiln.op.reduce import ArgReduceAttrs, CumAttrs, LossAttrs, ReduceAttrs, SoftmaxAttrs
from tests.helpers import F, model

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(0)
N = SizeVar("N")


def rand(shape, dtype="float32", lo=-3, hi=4) -> np.ndarray:
    if np.dtype(dtype).kind in "iu":
        return RNG.integers(max(lo, np.iinfo(dtype).min), hi, size=shape).astype(dtype)
    return RNG.uniform(lo, hi, size=shape).astype(dtype)


def check_vs_ort(op_type: str, inputs: list, attrs: dict, opset: int, consts: dict | None = None,
                 n_out: int = 1, rtol: float = 1e-5) -> list:
    """Run a one-node model in Kiln and onnxruntime; also check Kiln's inferred output types."""
    consts = consts or {}
    names = [f"in{i}" if v is not None else "" for i, v in enumerate(inputs)]
    feeds = {n: v for n, v in zip(names, inputs) if n and n not in consts}
    inits = [numpy_helper.from_array(consts[n], n) for n in consts]
    node = helper.make_node(op_type, names, [f"out{i}" for i in range(n_out)], **attrs)
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for n, v in feeds.items()]
    outs = [onnx.ValueInfoProto(name=f"out{i}") for i in range(n_out)]
    m = helper.make_model(helper.make_graph([node], "t", ins, outs, inits),
                          opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    m = onnx.shape_inference.infer_shapes(m)  # fills in the output types
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for vi, w in zip(m.graph.output, want):  # the checker wants a rank where shape inference gave none
        if not vi.type.tensor_type.HasField("shape"):
            vi.type.tensor_type.shape.dim.extend(onnx.TensorShapeProto.Dimension() for _ in w.shape)
    mod = from_onnx(m)
    got = evaluate(mod, feeds)
    types = mod.main.body.type.fields
    for g, w, t in zip(got, want, types):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert t.dtype == dt.from_numpy(g.dtype) and (t.shape is None or len(t.shape) == g.ndim)
        assert all(d == n for d, n in zip(t.shape or (), g.shape) if isinstance(d, int))
        np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-6)
    return got


def infer(op: str, *types, attrs=None, consts: dict[int, np.ndarray] | None = None):
    """The output type of `op` on inputs of the given types (a numpy array stands for a Constant)."""
    args = [Constant(t) if isinstance(t, np.ndarray) else Var(f"x{i}", t) for i, t in enumerate(types)]
    return get_op(op)(*args, attrs=attrs).type


# ---------------------------------------------------------------------------------------------
# reductions

REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]
AXES = [None, [0], [-1], [1, 2], [0, 2], [0, 1, 2]]


@pytest.mark.parametrize("op_type", REDUCE_OPS)
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_vs_ort(op_type, keepdims):
    lo = 0.5 if op_type == "ReduceLogSum" else -2
    for axes in AXES:
        for shape in [(3, 1, 5), (2, 7, 1)]:
            x = rand(shape, lo=lo, hi=2)
            if axes is None:
                check_vs_ort(op_type, [x], {"keepdims": keepdims}, 18)
            else:
                a = np.array(axes, np.int64)
                check_vs_ort(op_type, [x, a], {"keepdims": keepdims}, 18, consts={"in1": a})


@pytest.mark.parametrize("op_type, dtype", [("ReduceSum", "int64"), ("ReduceSum", "float64"),
                                            ("ReduceMax", "int32"), ("ReduceMin", "uint8"),
                                            ("ReduceProd", "int32"), ("ReduceMean", "int32")])
def test_reduce_dtypes_vs_ort(op_type, dtype):
    x = rand((4, 3, 5), dtype, lo=0 if dtype == "uint8" else -3)
    a = np.array([1], np.int64)
    check_vs_ort(op_type, [x, a], {"keepdims": 0}, 18, consts={"in1": a})


@pytest.mark.parametrize("op_type", ["ReduceSum", "ReduceMean", "ReduceMax"])
def test_reduce_old_opset_axes_attribute(op_type):
    x = rand((2, 3, 5))
    check_vs_ort(op_type, [x], {"axes": [0, -1], "keepdims": 0}, 11)
    check_vs_ort(op_type, [x], {}, 11)


@pytest.mark.parametrize("noop", [0, 1])
def test_reduce_runtime_axes_vs_ort(noop):
    x = rand((3, 5, 2))
    for axes in ([1], [-1, 0], []):
        a = np.array(axes, np.int64)
        check_vs_ort("ReduceSum", [x, a], {"keepdims": 0, "noop_with_empty_axes": noop}, 13)
        check_vs_ort("ReduceMax", [x, a], {"keepdims": 1, "noop_with_empty_axes": noop}, 18)


def test_reduce_noop_with_empty_axes_keeps_elementwise_part():
    x = rand((2, 3))
    empty = np.zeros(0, np.int64)
    noop = ReduceAttrs(noop_with_empty_axes=1)
    np.testing.assert_array_equal(get_op("reduce.sum").reference(noop, x, empty), x)
    np.testing.assert_allclose(get_op("reduce.sum_square").reference(noop, x, None), x * x)
    np.testing.assert_allclose(get_op("reduce.l2").reference(noop, x, empty), np.abs(x), rtol=1e-6)
    assert get_op("reduce.sum").reference(ReduceAttrs(), x, empty).shape == (1, 1)


@pytest.mark.parametrize("kind, want", [("sum", 0), ("prod", 1), ("max", -np.inf), ("min", np.inf),
                                        ("l1", 0), ("l2", 0), ("log_sum", -np.inf),
                                        ("log_sum_exp", -np.inf), ("sum_square", 0), ("mean", np.nan)])
def test_reduce_empty_set(kind, want):
    x = np.zeros((2, 0, 4), np.float32)
    out = get_op(f"reduce.{kind}").reference(ReduceAttrs(), x, np.array([1]))
    assert out.shape == (2, 1, 4) and out.dtype == np.float32
    np.testing.assert_array_equal(out, np.full((2, 1, 4), want, np.float32))


def test_reduce_empty_set_integer_and_bool_identities():
    attrs, axes = ReduceAttrs(keepdims=0), np.array([0])
    assert get_op("reduce.max").reference(attrs, np.zeros((0, 2), np.int32), axes).tolist() == [-2**31] * 2
    assert get_op("reduce.min").reference(attrs, np.zeros((0, 2), np.uint8), axes).tolist() == [255] * 2
    assert get_op("reduce.min").reference(attrs, np.zeros((0, 1), bool), axes).tolist() == [True]
    assert get_op("reduce.max").reference(attrs, np.array([[True, False]]), np.array([1])).tolist() == [True]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_reduce_half_precision_accumulates_wide(dtype):
    x = np.full((4096,), 0.1, np.float32).astype(dt.to_numpy(dtype))
    out = get_op("reduce.sum").reference(ReduceAttrs(keepdims=0), x, None)
    assert out.dtype == dt.to_numpy(dtype)
    assert abs(float(out) - float(x.astype(np.float32).sum())) < 0.01 * float(out)


def test_log_sum_exp_is_stable():
    x = np.array([[1000.0, 1000.0], [-1000.0, -np.inf]], np.float32)
    out = get_op("reduce.log_sum_exp").reference(ReduceAttrs(keepdims=0), x, np.array([1]))
    np.testing.assert_allclose(out, [1000 + np.log(2), -1000], rtol=1e-6)


def test_reduce_type_relation_symbolic_and_errors():
    x = TensorType((N, 3, 5), "float32")
    assert infer("reduce.sum", x, np.array([1]), attrs=ReduceAttrs()) == TensorType((N, 1, 5), "float32")
    assert infer("reduce.sum", x, np.array([-1, 0]), attrs=ReduceAttrs(keepdims=0)) == TensorType((3,), "float32")
    assert infer("reduce.max", x, attrs=ReduceAttrs(keepdims=0)) == TensorType((), "float32")
    assert infer("reduce.max", x, np.zeros(0, np.int64), attrs=ReduceAttrs(noop_with_empty_axes=1)) == x
    # axes known only at run time
    assert infer("reduce.sum", TensorType((N, 1, 5), "float32"), TensorType((2,), "int64"),
                 attrs=ReduceAttrs()) == TensorType((ANY, 1, ANY), "float32")
    assert infer("reduce.sum", x, TensorType((2,), "int64"), attrs=ReduceAttrs(keepdims=0)).shape == (ANY,)
    assert infer("reduce.sum", x, TensorType((ANY,), "int64"), attrs=ReduceAttrs(keepdims=0)).shape is None
    assert infer("reduce.mean", TensorType(None, "float32"), attrs=ReduceAttrs(keepdims=0)).shape == ()
    with pytest.raises(TypeInferenceError, match="out of range"):
        infer("reduce.sum", x, np.array([3]), attrs=ReduceAttrs())
    with pytest.raises(TypeInferenceError, match="twice"):
        infer("reduce.sum", x, np.array([1, -2]), attrs=ReduceAttrs())
    with pytest.raises(TypeInferenceError, match="dtype"):
        infer("reduce.sum", TensorType((2,), "bool"), attrs=ReduceAttrs())
    with pytest.raises(TypeInferenceError, match="axes"):
        infer("reduce.sum", x, np.array([1.0]), attrs=ReduceAttrs())


# ---------------------------------------------------------------------------------------------
# arg-reductions


@pytest.mark.parametrize("op_type", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_arg_reduce_vs_ort(op_type, dtype):
    for axis in (0, 1, -1):
        for keepdims in (0, 1):
            for last in (0, 1):
                x = rand((3, 7, 1), dtype, lo=0, hi=3)  # small range: ties exercise select_last_index
                check_vs_ort(op_type, [x], {"axis": axis, "keepdims": keepdims, "select_last_index": last}, 13)


def test_arg_reduce_type_relation():
    attrs = ArgReduceAttrs(axis=-1, keepdims=0)
    assert infer("reduce.arg_max", TensorType((N, 5), "float16"), attrs=attrs) == TensorType((N,), "int64")
    assert infer("reduce.arg_min", TensorType((N, 5), "int8"), attrs=ArgReduceAttrs()) == TensorType((1, 5), "int64")
    with pytest.raises(TypeInferenceError, match="rank"):
        infer("reduce.arg_max", TensorType((), "float32"), attrs=attrs)
    with pytest.raises(TypeInferenceError, match="out of range"):
        infer("reduce.arg_max", TensorType((2, 3), "float32"), attrs=ArgReduceAttrs(axis=2))


# ---------------------------------------------------------------------------------------------
# cumulative scans


@pytest.mark.parametrize("dtype", ["float32", "int64", "int32", "float64"])
def test_cum_sum_vs_ort(dtype):
    for axis in (0, 1, -1):
        for exclusive in (0, 1):
            for reverse in (0, 1):
                x, ax = rand((5, 1, 3), dtype), np.array(axis, np.int64)
                check_vs_ort("CumSum", [x, ax], {"exclusive": exclusive, "reverse": reverse}, 14)


@pytest.mark.parametrize("exclusive, reverse, want", [(0, 0, [1, 2, 6, 24]), (1, 0, [1, 1, 2, 6]),
                                                      (0, 1, [24, 24, 12, 4]), (1, 1, [24, 12, 4, 1])])
def test_cum_prod(exclusive, reverse, want):
    x = np.array([[1, 2, 3, 4]], np.int32)
    out = get_op("reduce.cum_prod").reference(CumAttrs(exclusive, reverse), x, np.array([1]))
    assert out.dtype == np.int32 and out.tolist() == [want]


def test_cum_sum_empty_axis_and_types():
    out = get_op("reduce.cum_sum").reference(CumAttrs(exclusive=1), np.zeros((0, 2), np.float32), np.array(0))
    assert out.shape == (0, 2)
    x = TensorType((N, 3), "float32")
    assert infer("reduce.cum_sum", x, TensorType((), "int32"), attrs=CumAttrs()) == x
    with pytest.raises(TypeInferenceError, match="out of range"):
        infer("reduce.cum_sum", x, np.array(2), attrs=CumAttrs())
    with pytest.raises(TypeInferenceError, match="scalar"):
        infer("reduce.cum_sum", x, TensorType((2,), "int64"), attrs=CumAttrs())


# ---------------------------------------------------------------------------------------------
# softmax family


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset", [11, 13])
def test_softmax_family_vs_ort(op_type, opset):
    for axis in (0, 1, -1, 2):
        x = rand((3, 1, 5, 2))
        x[0, 0, :2, 0] = 3.0  # a tie: Hardmax picks the first
        check_vs_ort(op_type, [x], {"axis": axis}, opset)
    check_vs_ort(op_type, [rand((2, 7))], {}, opset)  # default axis differs by opset


def test_softmax_old_opset_coerces_to_2d():
    x = rand((2, 3, 4))
    m = model([helper.make_node("Softmax", ["x"], ["y"], axis=1)], [("x", F, x.shape)], [("y", F, x.shape)],
              opset=11)
    mod = from_onnx(m)
    assert mod.main.body.fields[0].attrs == SoftmaxAttrs(axis=1, coerce_2d=1)
    y = evaluate(mod, {"x": x})[0]
    np.testing.assert_allclose(y.reshape(2, -1).sum(axis=1), [1, 1], rtol=1e-6)


def test_softmax_large_values_and_half():
    x = np.array([[1000, 1001, 1002]], np.float16)
    y = get_op("reduce.softmax").reference(SoftmaxAttrs(), x)
    assert y.dtype == np.float16 and np.all(np.isfinite(y))
    x = np.array([[0, 1]], ml_dtypes.bfloat16)
    assert get_op("reduce.hardmax").reference(SoftmaxAttrs(), x).tolist() == [[0, 1]]


def test_softmax_type_relation():
    x = TensorType((N, 4), "float32")
    assert infer("reduce.softmax", x, attrs=SoftmaxAttrs(axis=-1)) == x
    assert infer("reduce.hardmax", TensorType(None, "float16"), attrs=SoftmaxAttrs()).shape is None
    with pytest.raises(TypeInferenceError, match="dtype"):
        infer("reduce.softmax", TensorType((2,), "int32"), attrs=SoftmaxAttrs())
    with pytest.raises(TypeInferenceError, match="out of range"):
        infer("reduce.log_softmax", x, attrs=SoftmaxAttrs(axis=2))


# ---------------------------------------------------------------------------------------------
# losses

LOSS_CASES = [((5, 3), {}), ((4, 7, 2), {"reduction": "sum"}), ((2, 3, 1, 5), {"reduction": "none"}),
              ((4, 5, 3), {"ignore_index": 1}), ((3, 4, 2), {"ignore_index": -1, "reduction": "none"})]


@pytest.mark.parametrize("op_type", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
@pytest.mark.parametrize("shape, attrs", LOSS_CASES)
@pytest.mark.parametrize("weighted", [False, True])
def test_losses_vs_ort(op_type, shape, attrs, weighted):
    c = shape[1]
    x = rand(shape)
    target = RNG.integers(0, c, size=(shape[0],) + shape[2:]).astype(np.int64)
    if "ignore_index" in attrs:
        target.flat[::3] = attrs["ignore_index"]
    inputs = [x, target] + ([rand((c,), lo=0.1, hi=2)] if weighted else [])
    n_out = 2 if op_type == "SoftmaxCrossEntropyLoss" else 1
    check_vs_ort(op_type, inputs, attrs, 13, n_out=n_out, rtol=1e-4)


def test_loss_type_relation():
    x, t = TensorType((N, 3, 5), "float32"), TensorType((N, 5), "int64")
    assert infer("reduce.negative_log_likelihood_loss", x, t, attrs=LossAttrs()) == TensorType((), "float32")
    assert infer("reduce.negative_log_likelihood_loss", x, t, attrs=LossAttrs(reduction="none")) == \
        TensorType((N, 5), "float32")
    assert infer("reduce.softmax_cross_entropy_loss", x, TensorType((ANY, 5), "int32"),
                 attrs=LossAttrs(reduction="none")) == TupleType((TensorType((N, 5), "float32"), x))
    with pytest.raises(TypeInferenceError, match="rank"):
        infer("reduce.negative_log_likelihood_loss", x, TensorType((N,), "int64"), attrs=LossAttrs())
    with pytest.raises(TypeInferenceError, match="target dim 1"):
        infer("reduce.negative_log_likelihood_loss", x, TensorType((N, 4), "int64"), attrs=LossAttrs())
    with pytest.raises(TypeInferenceError, match="weight"):
        infer("reduce.negative_log_likelihood_loss", x, t, TensorType((4,), "float32"), attrs=LossAttrs())
    with pytest.raises(TypeInferenceError, match="reduction"):
        infer("reduce.negative_log_likelihood_loss", x, t, attrs=LossAttrs(reduction="max"))
