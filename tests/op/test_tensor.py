"""The tensor family: references vs onnxruntime / numpy, type relations with symbolic dims, errors,
and the converters' older-opset forms."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import kiln
from kiln.errors import TypeInferenceError
from kiln.frontend import onnx_tensor
from kiln.ir.expr import Constant, Var, absent
from kiln.ir.types import ANY, SizeVar, TensorType, TupleType, compatible
from kiln.op.interpreter import run_op
from kiln.op.registry import get_op
from kiln.op.reshape import reshape_dims
from tests.helpers import model

ort = pytest.importorskip("onnxruntime")
N, M = SizeVar("N"), SizeVar("M")
RNG = np.random.default_rng(0)


def rand(*shape, dtype=np.float32) -> np.ndarray:
    return (RNG.standard_normal(shape) * 3).astype(dtype)


def i64(*v) -> np.ndarray:
    return np.array(v, np.int64)


def run(name: str, *args, **attrs):
    op = get_op(name)
    return run_op(op, op.attrs_type(**attrs) if op.attrs_type else None, list(args))


def infer(name: str, *args, **attrs):
    """Output type of `name` on args: a TensorType is a non-constant input, an array a Constant,
    None an omitted input."""
    exprs = [absent() if a is None else Var(f"x{i}", a) if isinstance(a, TensorType) else Constant(a)
             for i, a in enumerate(args)]
    return get_op(name)(*exprs, **attrs).type


def onnx_model(op_type: str, args: dict, inits: set, n_out: int, opset: int, out_ranks=None, **attrs):
    """A one-node model over `args` in order (None: an omitted input; names in `inits` are initializers)."""
    node = helper.make_node(op_type, [k if v is not None else "" for k, v in args.items()],
                            [f"y{i}" for i in range(n_out)], **attrs)
    ins = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for k, v in args.items() if v is not None and k not in inits]
    outs = [helper.make_empty_tensor_value_info(f"y{i}") for i in range(n_out)]
    g = helper.make_graph([node], "t", ins, outs, [numpy_helper.from_array(args[k], k) for k in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    m = onnx.shape_inference.infer_shapes(m)
    for o, rank in zip(m.graph.output, out_ranks or ()):  # the checker wants a shape on outputs
        if not o.type.tensor_type.HasField("shape"):
            for i in range(rank):
                o.type.tensor_type.shape.dim.add().dim_param = f"d{i}"
    return m


def check_vs_ort(op_type: str, feeds: dict, consts: dict | None = None, n_out: int = 1, opset: int = 21,
                 **attrs) -> list:
    """Kiln (import, type relations, interpreter) against onnxruntime on a one-node model.

    `consts` (shape-deciding inputs) run both as initializers and as graph inputs."""
    args = {**feeds, **(consts or {})}
    given = {k for k, v in (consts or {}).items() if v is not None}
    runs = []
    for inits in (given, set()):
        fed = {k: v for k, v in args.items() if v is not None and k not in inits}
        m = onnx_model(op_type, args, inits, n_out, opset, **attrs)
        want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, fed)
        m = onnx_model(op_type, args, inits, n_out, opset, out_ranks=[w.ndim for w in want], **attrs)
        mod = kiln.from_onnx(m)
        got = kiln.evaluate(mod, fed)
        for t, g, w in zip(mod.main.body.type.fields, got, want):
            assert g.dtype == w.dtype and g.shape == w.shape, (op_type, g.dtype, g.shape, w.dtype, w.shape)
            assert compatible(t, TensorType(g.shape, t.dtype)), (op_type, t, g.shape)
            if g.dtype.kind == "f":
                np.testing.assert_allclose(g, w, rtol=1e-6)
            else:
                np.testing.assert_array_equal(g, w)
        runs.append(got)
    return runs[0]


# ---------------------------------------------------------------------------------------------
# references vs onnxruntime

X357 = rand(3, 5, 7)


@pytest.mark.parametrize("shape,allowzero", [((0, -1), 0), ((-1,), 0), ((7, 0, 3), 0), ((1, 105, 1), 1),
                                             ((5, -1, 1, 3), 0)])
def test_reshape(shape, allowzero):
    check_vs_ort("Reshape", {"x": X357}, {"s": i64(*shape)}, allowzero=allowzero)


def test_reshape_allowzero_keeps_zero():
    x = np.zeros((0, 3), np.float32)
    assert run("tensor.reshape", x, i64(3, 0), allowzero=1).shape == (3, 0)
    check_vs_ort("Reshape", {"x": x}, {"s": i64(3, 0)}, allowzero=1)


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1, -3])
def test_flatten(axis):
    check_vs_ort("Flatten", {"x": X357}, axis=axis)


@pytest.mark.parametrize("perm", [None, (1, 0, 2), (2, 0, 1)])
def test_transpose(perm):
    check_vs_ort("Transpose", {"x": X357.astype(np.int8)}, **({} if perm is None else {"perm": perm}))


def test_squeeze_unsqueeze():
    x = rand(1, 3, 1, 5)
    check_vs_ort("Squeeze", {"x": x}, {"axes": i64(0, -2)})
    check_vs_ort("Squeeze", {"x": x})
    check_vs_ort("Unsqueeze", {"x": rand(3, 5)}, {"axes": i64(3, 0)})
    check_vs_ort("Unsqueeze", {"x": rand(3, 5)}, {"axes": i64(-1)})


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
def test_concat(dtype):
    xs = {"a": rand(2, 3).astype(dtype), "b": rand(2, 1).astype(dtype), "c": rand(2, 7).astype(dtype)}
    check_vs_ort("Concat", xs, axis=-1)
    check_vs_ort("Concat", {"a": rand(1, 3), "b": rand(5, 3)}, axis=0)


def test_split():
    x = rand(7, 4)
    check_vs_ort("Split", {"x": x}, {"s": i64(2, 5)}, n_out=2, opset=18)
    check_vs_ort("Split", {"x": x}, {"s": i64(0, 7)}, n_out=2, opset=18)
    check_vs_ort("Split", {"x": x}, n_out=3, opset=18, num_outputs=3)  # uneven: 3, 3, 1
    check_vs_ort("Split", {"x": rand(4, 6)}, n_out=3, opset=13, axis=1)  # equal parts from output count
    check_vs_ort("Split", {"x": x}, n_out=2, opset=11, split=(3, 4))


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ((-1, 0), (-100, 7), (0, 1), (-2, 3)), ((1,), (2**62,), None, None), ((0, 10), (3, -10), (-1, 1), (1, -1)),
    ((5,), (-1,), (2,), (-1,)), ((100,), (200,), (1,), (1,))])
def test_slice(starts, ends, axes, steps):
    consts = {"st": i64(*starts), "en": i64(*ends), "ax": None if axes is None else i64(*axes),
              "sp": None if steps is None else i64(*steps)}
    check_vs_ort("Slice", {"x": X357}, consts)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 6), st.integers(-9, 9), st.integers(-9, 9), st.sampled_from([-3, -2, -1, 1, 2, 3]))
def test_slice_matches_python_slicing(n, start, end, step):
    """ONNX clamping is Python's slice semantics, except a negative-step start below -dim (next test)."""
    assume(not (step < 0 and start < -n))
    x = np.arange(n)
    got = run("tensor.slice", x, i64(start), i64(end), None, i64(step))
    np.testing.assert_array_equal(got, x[start:end:step])
    assert infer("tensor.slice", x, i64(start), i64(end), None, i64(step)).shape == got.shape


def test_slice_negative_step_start_clamps_to_zero():
    """ONNX clamps such a start to 0 (one element), where Python slicing gives nothing."""
    check_vs_ort("Slice", {"x": np.arange(3)}, {"s": i64(-5), "e": i64(-9), "a": i64(0), "t": i64(-1)})


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_family(axis):
    x = rand(5, 3, 2)
    d = x.shape[axis]
    check_vs_ort("Gather", {"x": x, "i": RNG.integers(-d, d, (2, 4))}, axis=axis)
    idx = RNG.integers(-d, d, (2, 3, 2))
    check_vs_ort("GatherElements", {"x": x, "i": idx.astype(np.int32)}, axis=axis)


@pytest.mark.parametrize("batch_dims,idx_shape", [(0, (2, 2)), (0, (4, 3)), (1, (5, 1, 2)), (2, (5, 3, 1))])
def test_gather_nd(batch_dims, idx_shape):
    x = rand(5, 3, 4)
    hi = [x.shape[batch_dims + j] for j in range(idx_shape[-1])]
    idx = np.stack([RNG.integers(-h, h, idx_shape[:-1]) for h in hi], axis=-1)
    check_vs_ort("GatherND", {"x": x, "i": idx}, batch_dims=batch_dims)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements(reduction):
    x = rand(4, 5)
    if reduction == "none":  # duplicate indices have no defined winner
        idx = np.stack([RNG.permutation(4)[:3] for _ in range(5)], axis=1) - 4
    else:
        idx = RNG.integers(-4, 4, (3, 5))
    check_vs_ort("ScatterElements", {"x": x, "i": idx, "u": rand(3, 5)}, axis=0, reduction=reduction,
                 opset=18)


@pytest.mark.parametrize("reduction", ["none", "add", "max"])
def test_scatter_nd(reduction):
    x = rand(4, 5, 3).astype(np.int32)
    idx = i64([0, 1], [3, 4], [2, 2]) if reduction == "none" else i64([0, 1], [3, 4], [0, 1])
    check_vs_ort("ScatterND", {"x": x, "i": idx, "u": rand(3, 3).astype(np.int32)}, reduction=reduction,
                 opset=18)


def test_old_scatter_is_scatter_elements():
    check_vs_ort("Scatter", {"x": rand(3, 3), "i": i64([1, 0, 2]), "u": rand(1, 3)}, axis=0, opset=10)


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter(mode):
    cache, upd = rand(2, 3, 5, 4), rand(2, 3, 2, 4)
    where = i64(1, 4) if mode == "circular" else i64(1, 3)
    got = run("tensor.tensor_scatter", cache, upd, where, mode=mode)
    want = cache.copy()
    for b, start in enumerate(where):
        for s in range(2):
            want[b, :, (start + s) % 5] = upd[b, :, s]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(run("tensor.tensor_scatter", cache, upd), np.concatenate(
        [upd, cache[:, :, 2:]], axis=2))


def test_expand_tile():
    check_vs_ort("Expand", {"x": rand(3, 1)}, {"s": i64(2, 1, 5)})
    check_vs_ort("Expand", {"x": rand(1, 7)}, {"s": i64(1)})
    check_vs_ort("Tile", {"x": rand(2, 3).astype(np.uint8)}, {"r": i64(3, 1)})
    check_vs_ort("Tile", {"x": rand(2, 3)}, {"r": i64(0, 2)})


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad(mode):
    x = rand(4, 5, 3)
    check_vs_ort("Pad", {"x": x}, {"p": i64(1, 0, 2, 2), "v": None, "a": i64(0, -1)}, mode=mode)
    check_vs_ort("Pad", {"x": x}, {"p": i64(0, 2, 1, 1, 0, 2)}, mode=mode)
    if mode == "constant":
        check_vs_ort("Pad", {"x": x}, {"p": i64(-1, 2, 1, 1, -2, 0), "v": np.array(7.5, np.float32)})


def test_old_opset_attribute_forms():
    x = rand(1, 3, 1, 5)
    check_vs_ort("Squeeze", {"x": x}, opset=11, axes=(0, 2))
    check_vs_ort("Unsqueeze", {"x": rand(3, 5)}, opset=11, axes=(0, 3))
    check_vs_ort("Slice", {"x": X357}, opset=9, starts=(1, -3), ends=(2**62, -1), axes=(0, 2))
    node = helper.make_node("Reshape", ["x"], ["y"], shape=(5, -1))
    m = model([node], [("x", TensorProto.FLOAT, X357.shape)], [("y", TensorProto.FLOAT, (5, 21))], opset=4)
    np.testing.assert_array_equal(kiln.evaluate(kiln.from_onnx(m), {"x": X357})[0], X357.reshape(5, 21))


def test_import_keeps_symbolic_dims():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4])
    nodes = [helper.make_node("Reshape", ["x", "s"], ["r"]), helper.make_node("Shape", ["r"], ["y"], start=1)]
    g = helper.make_graph(nodes, "t", [x], [helper.make_tensor_value_info("y", TensorProto.INT64, [1])],
                          [numpy_helper.from_array(i64(0, -1), "s")])
    mod = kiln.from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]))
    reshaped = mod.main.body.fields[0].args[0]
    assert reshaped.type == T(N, 12)
    np.testing.assert_array_equal(kiln.evaluate(mod, {"x": rand(2, 3, 4)})[0], [12])


def test_pad_old_opset_attributes():
    x = rand(2, 3)
    got = check_vs_ort("Pad", {"x": x}, opset=2, pads=(0, 1, 1, 2), value=1.5)[0]
    np.testing.assert_array_equal(got, np.pad(x, ((0, 1), (1, 2)), constant_values=1.5))


def test_center_crop_pad():
    x = rand(5, 4, 3)
    got = run("tensor.center_crop_pad", x, i64(3, 7), axes=(0, 1))
    want = np.zeros((3, 7, 3), np.float32)
    want[:, 1:5] = x[1:4]
    np.testing.assert_array_equal(got, want)
    check_vs_ort("CenterCropPad", {"x": x}, {"s": i64(2, 8, 1)}, opset=18)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_space_round_trip(mode):
    x = rand(2, 8, 3, 5)
    y = check_vs_ort("DepthToSpace", {"x": x}, blocksize=2, mode=mode)[0]
    assert y.shape == (2, 2, 6, 10)
    np.testing.assert_array_equal(run("tensor.space_to_depth", y, blocksize=2, mode=mode), x)
    check_vs_ort("SpaceToDepth", {"x": y}, blocksize=2)


def test_shape_size():
    for start, end in [(0, None), (1, None), (-2, None), (1, -1), (-10, 10), (2, 1)]:
        check_vs_ort("Shape", {"x": X357}, start=start, **({} if end is None else {"end": end}))
    check_vs_ort("Size", {"x": X357})


def test_constant_of_shape():
    check_vs_ort("ConstantOfShape", {}, {"s": i64(2, 3)}, value=numpy_helper.from_array(np.array([7], np.int32)))
    check_vs_ort("ConstantOfShape", {}, {"s": i64(0)})
    assert run("tensor.constant_of_shape", i64()).shape == ()


@pytest.mark.parametrize("dtype,args", [(np.int32, (10, 4, -2)), (np.int64, (3, 9, 3)), (np.float32, (1, 2, 0.3)),
                                        (np.float64, (-1, -5, -0.7)), (np.int16, (5, 5, 1))])
def test_range(dtype, args):
    check_vs_ort("Range", {k: np.array(v, dtype) for k, v in zip("sld", args)})


def test_eye_like_one_hot_trilu():
    check_vs_ort("EyeLike", {"x": rand(3, 5)}, k=1, dtype=TensorProto.INT32)
    check_vs_ort("EyeLike", {"x": rand(4, 2)}, k=-1)
    idx = RNG.integers(-6, 7, (3, 4))  # includes out-of-range values: all "off"
    for axis in (-1, 0, 1):
        check_vs_ort("OneHot", {"i": idx}, {"d": np.array(5, np.int64), "v": np.array([2, 9], np.float32)},
                     axis=axis)
    for upper in (0, 1):
        for k in (-1, 0, 2):
            check_vs_ort("Trilu", {"x": rand(2, 3, 5)}, {"k": np.array(k, np.int64)}, upper=upper)


def test_compress_nonzero():
    x = rand(3, 4)
    check_vs_ort("Compress", {"x": x}, {"c": np.array([True, False, True])}, axis=0)
    check_vs_ort("Compress", {"x": x}, {"c": np.array([False, True, True, False, True])})
    check_vs_ort("NonZero", {"x": (x > 0).astype(np.int32)})
    assert run("tensor.non_zero", np.array(3.0)).shape == (0, 1)


@pytest.mark.parametrize("batch_axis,time_axis", [(1, 0), (0, 1)])
def test_reverse_sequence(batch_axis, time_axis):
    x = rand(4, 4, 3)
    check_vs_ort("ReverseSequence", {"x": x, "l": i64(1, 4, 0, 2)}, batch_axis=batch_axis, time_axis=time_axis)


@pytest.mark.parametrize("axis", [None, 0, -1])
@pytest.mark.parametrize("sorted_", [0, 1])
def test_unique(axis, sorted_):
    x = RNG.integers(0, 3, (4, 3)).astype(np.float32)
    x[2] = x[0]
    kw = {} if axis is None else {"axis": axis}
    if axis is None:
        check_vs_ort("Unique", {"x": x}, n_out=4, sorted=sorted_, **kw)
    y, first, inverse, counts = run("tensor.unique", x, sorted=sorted_, **kw)
    flat = x.reshape(-1) if axis is None else x
    ax = 0 if axis is None else axis
    np.testing.assert_array_equal(np.take(y, inverse, axis=ax), flat)
    np.testing.assert_array_equal(np.take(flat, first, axis=ax), y)
    assert counts.sum() == flat.shape[ax] and first.dtype == np.int64
    assert sorted_ or list(first) == sorted(first)


@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint64])
def test_top_k_ties_keep_index_order(largest, dtype):
    x = RNG.integers(0, 4, (3, 11)).astype(dtype)  # many ties
    for axis in (-1, 0):
        vals, idx = run("tensor.top_k", x, i64(3), largest=largest, axis=axis)
        if dtype != np.uint64:  # onnxruntime has no uint64 TopK
            check_vs_ort("TopK", {"x": x}, {"k": i64(3)}, n_out=2, largest=largest, axis=axis)
        order = np.argsort(-x.astype(np.float64) if largest else x, axis=axis, kind="stable")
        np.testing.assert_array_equal(idx, np.take(order, range(3), axis=axis))
        np.testing.assert_array_equal(vals, np.take_along_axis(x, idx, axis))


def test_top_k_old_opset_k_attribute():
    x = rand(2, 9)
    vals, _ = check_vs_ort("TopK", {"x": x}, n_out=2, opset=9, k=4)
    np.testing.assert_array_equal(vals, -np.sort(-x, axis=1)[:, :4])


@pytest.mark.parametrize("strides,pads,dilations", [((1, 1), (0, 0, 0, 0), (1, 1)), ((2, 1), (1, 0, 1, 2), (1, 2))])
def test_col2im(strides, pads, dilations):
    image, block = (5, 7), (2, 3)
    blocks = [(image[i] + pads[i] + pads[i + 2] - dilations[i] * (block[i] - 1) - 1) // strides[i] + 1
              for i in range(2)]
    x = rand(2, 3 * 6, blocks[0] * blocks[1])
    got = run("tensor.col2im", x, i64(*image), i64(*block), strides=strides, pads=pads, dilations=dilations)
    want = np.zeros((2, 3, image[0] + pads[0] + pads[2], image[1] + pads[1] + pads[3]), np.float32)
    cols = x.reshape(2, 3, *block, *blocks)
    for i, j, p, q in np.ndindex(*block, *blocks):
        want[:, :, p * strides[0] + i * dilations[0], q * strides[1] + j * dilations[1]] += cols[:, :, i, j, p, q]
    np.testing.assert_allclose(got, want[:, :, pads[0]:pads[0] + 5, pads[1]:pads[1] + 7], rtol=1e-6)
    assert infer("tensor.col2im", TensorType((N, 18, x.shape[2]), "float32"), i64(*image), i64(*block),
                 strides=strides, pads=pads, dilations=dilations) == TensorType((N, 3, 5, 7), "float32")


def test_constant_node_forms():
    def const(**attrs):
        m = onnx_model("Constant", {}, set(), 1, 21, **attrs)
        return kiln.evaluate(kiln.from_onnx(m), {})[0]

    assert const(value_float=1.5).dtype == np.float32 and const(value_int=3) == 3
    np.testing.assert_array_equal(const(value_ints=[1, 2]), i64(1, 2))
    assert const(value_strings=["a", "bc"]).tolist() == ["a", "bc"]
    assert const(value_string="hi").item() == "hi"


@pytest.mark.parametrize("indices", [i64(1, 4), i64([0, 1], [1, 1])])
def test_sparse_constant_densifies(indices):
    values = numpy_helper.from_array(np.array([5.0, 6.0], np.float32))
    sparse = helper.make_sparse_tensor(values, numpy_helper.from_array(indices), [2, 3])
    np.testing.assert_array_equal(onnx_tensor.dense(sparse), [[0, 5, 0], [0, 6, 0]])


# ---------------------------------------------------------------------------------------------
# type relations with symbolic dims, non-constant shape inputs, and errors

def T(*shape, dtype="float32"):
    return TensorType(shape, dtype)


def test_reshape_symbolic():
    assert reshape_dims((N, 3, 4), (0, -1), 0) == (N, 12)
    assert reshape_dims((N, 3, M), (0, 3, -1), 0) == (N, 3, M)
    assert reshape_dims((N, M), (-1,), 0) == (ANY,)
    assert reshape_dims((N, 6), (-1, 2, 3), 0) == (N, 2, 3)
    assert reshape_dims((N, 3), (-1, 2), 0) == (ANY, 2)
    assert reshape_dims(None, (0, 4), 0) == (ANY, 4)
    assert infer("tensor.reshape", T(N, 3), T(3, dtype="int64")) == TensorType((ANY, ANY, ANY), "float32")
    assert infer("tensor.reshape", T(N, 3), T(ANY, dtype="int64")) == TensorType(None, "float32")


@pytest.mark.parametrize("shape", [(4, 4), (-1, -1), (-2, 3), (2, 0, -1)])
def test_reshape_errors(shape):
    with pytest.raises(TypeInferenceError):
        infer("tensor.reshape", T(3, 5), i64(*shape), allowzero=int(0 in shape))


def test_shape_relations_symbolic():
    assert infer("tensor.concat", T(N, 3), T(N, 5), axis=1) == T(N, 8)
    assert infer("tensor.concat", T(N, 3), T(2, 3), axis=0) == T(ANY, 3)
    assert infer("tensor.concat", T(ANY, 3), T(2, 3), axis=1) == T(2, 6)
    assert infer("tensor.flatten", T(N, 3, 1), axis=1) == T(N, 3)
    assert infer("tensor.flatten", T(N, 3, 1), axis=2) == T(ANY, 1)
    assert infer("tensor.gather", T(N, 5), T(M, dtype="int32"), axis=1) == T(N, M)
    assert infer("tensor.slice", T(N, 7), i64(0, 1), i64(2**63 - 1, -1)) == T(N, 5)
    assert infer("tensor.slice", T(N, 7), i64(1), i64(2**63 - 1)) == T(ANY, 7)
    assert infer("tensor.slice", T(N, 7), T(1, dtype="int64"), i64(5), i64(1)) == T(N, ANY)
    assert infer("tensor.pad", T(N, 7), i64(0, 1, 0, 2)) == T(N, 10)
    assert infer("tensor.pad", T(N, 7), T(4, dtype="int64")) == T(ANY, ANY)
    assert infer("tensor.tile", T(N, 2), i64(1, 3)) == T(N, 6)
    assert infer("tensor.expand", T(N, 1), i64(4, 1, 5)) == T(4, N, 5)
    assert infer("tensor.squeeze", T(N, 1), i64(1)) == T(N)
    assert infer("tensor.squeeze", T(N, 1)) == TensorType(None, "float32")
    assert infer("tensor.unsqueeze", T(N), i64(0, -1)) == T(1, N, 1)
    assert infer("tensor.transpose", T(N, M, 2)) == T(2, M, N)
    assert infer("tensor.shape", T(N, M, 2), start=1) == T(2, dtype="int64")
    assert infer("tensor.depth_to_space", T(N, 8, 3, M), blocksize=2) == T(N, 2, 6, ANY)
    assert infer("tensor.one_hot", T(N, 3, dtype="int64"), i64(10), T(2), axis=1) == T(N, 10, 3)
    assert infer("tensor.range", T(dtype="int32"), T(dtype="int32"), T(dtype="int32")) == T(ANY, dtype="int32")
    assert infer("tensor.range", *(np.array(v, np.int32) for v in (3, 10, 3))) == T(3, dtype="int32")
    assert infer("tensor.non_zero", T(N, 2)) == T(2, ANY, dtype="int64")


def test_multi_output_relations():
    parts = infer("tensor.split", T(N, 7), i64(3, 4), axis=1)
    assert parts == TupleType((T(N, 3), T(N, 4)))
    assert infer("tensor.split", T(N, 7), num_outputs=2) == TupleType((T(ANY, 7), T(ANY, 7)))
    assert infer("tensor.split", T(7), num_outputs=3) == TupleType((T(3), T(3), T(1)))
    vals, idx = infer("tensor.top_k", T(N, 9), i64(4)).fields
    assert vals == T(N, 4) and idx == T(N, 4, dtype="int64")
    assert infer("tensor.top_k", T(N, 9), T(1, dtype="int64")).fields[0] == T(N, ANY)
    y, first, inverse, counts = infer("tensor.unique", T(N, 3), axis=1).fields
    assert y == T(N, ANY) and inverse == T(3, dtype="int64") and first == counts == T(ANY, dtype="int64")
    assert infer("tensor.unique", T(2, 3)).fields[2] == T(6, dtype="int64")


@pytest.mark.parametrize("name,args,attrs", [
    ("tensor.transpose", (T(2, 3),), {"perm": (0, 0)}),
    ("tensor.concat", (T(2, 3), T(3, 3)), {"axis": 1}),
    ("tensor.concat", (T(2, 3), T(2, 3, dtype="int32")), {"axis": 0}),
    ("tensor.gather", (T(2, 3), T(2)), {"axis": 0}),
    ("tensor.gather", (T(2, 3), T(2, dtype="int64")), {"axis": 2}),
    ("tensor.squeeze", (T(2, 3), i64(0)), {}),
    ("tensor.split", (T(7,), i64(3, 3)), {}),
    ("tensor.split", (T(7,),), {}),
    ("tensor.top_k", (T(2, 3), i64(4)), {}),
    ("tensor.slice", (T(5,), i64(0), i64(3), i64(0), i64(0)), {}),
    ("tensor.pad", (T(5,), i64(1, 1)), {"mode": "mirror"}),
    ("tensor.pad", (T(5,), i64(1, 1, 1)), {}),
    ("tensor.depth_to_space", (T(1, 6, 2, 2),), {"blocksize": 2}),
    ("tensor.scatter_elements", (T(3,), T(2, dtype="int64"), T(2)), {"reduction": "sum"}),
    ("tensor.scatter_nd", (T(3, 4), T(2, 1, dtype="int64"), T(2, 5)), {}),
    ("tensor.gather_nd", (T(3, 4), T(2, 3, dtype="int64")), {}),
    ("tensor.eye_like", (T(3,),), {}),
    ("tensor.range", (T(dtype="int32"), T(dtype="int64"), T(dtype="int32")), {}),
    ("tensor.reverse_sequence", (T(3, 4), i64(1, 2, 3)), {}),
])
def test_type_errors(name, args, attrs):
    with pytest.raises(TypeInferenceError):
        infer(name, *args, **attrs)
