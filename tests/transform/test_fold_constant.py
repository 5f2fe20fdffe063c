"""FoldConstant: constant subgraphs, propagation through lets/tuples/ifs, shape-chain folding."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

import kiln
from kiln.ir import Call, Op, post_order
from kiln.transform import PASSES
from tests.helpers import F, model
from tests.transform.golden import assert_golden, run_pass

FOLD = PASSES["fold-constant"]


def test_constant_call_chain_folds():
    assert_golden(FOLD, """
def @main(%x: Tensor[(2,), float32]) -> Tensor[(2,), float32] {
  %0 = math.add([1.0, 2.0]:float32(2,), [3.0, 4.0]:float32(2,));
  %1 = math.mul(%0, [2.0, 2.0]:float32(2,));
  math.add(%x, %1)
}""", """
def @main(%x: Tensor[(2,), float32]) -> Tensor[(2,), float32] {
  math.add(%x, [8.0, 12.0]:float32(2,))
}""")


def test_let_tuple_and_if_propagation():
    assert_golden(FOLD, """
def @main(%x: Tensor[(2,), float32]) -> Tensor[(2,), float32] {
  let %c: Tensor[(2,), float32] = math.neg([1.0, -1.0]:float32(2,));
  if ([true]:bool(1,)) {
    %0 = (%c, %x);
    %1 = %0.0;
    math.add(%x, %1)
  } else {
    %x
  }
}""", """
def @main(%x: Tensor[(2,), float32]) -> Tensor[(2,), float32] {
  math.add(%x, [-1.0, 1.0]:float32(2,))
}""")


def test_shape_gather_concat_reshape_chain_becomes_static():
    # reshape x (2, 3, 4) to (shape[0], -1) computed in-graph
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["d0"], axis=0),
        helper.make_node("Unsqueeze", ["d0", "axes0"], ["d0u"]),
        helper.make_node("Concat", ["d0u", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    inits = [onnx.numpy_helper.from_array(np.array(0, np.int64), "zero"),
             onnx.numpy_helper.from_array(np.array([0], np.int64), "axes0"),
             onnx.numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    m = model(nodes, [("x", F, [2, 3, 4])], [("y", F, [2, 12])], inits)
    mod = kiln.from_onnx(m)
    out = run_pass(FOLD, mod)
    ops = [e.op.name for e in post_order(out.main) if isinstance(e, Call) and isinstance(e.op, Op)]
    assert ops == ["tensor.reshape"]
    assert str(out.main.type.ret) == "(Tensor[(2, 12), float32],)"


def test_symbolic_dims_stay_symbolic():
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Reshape", ["x", "s"], ["y"])]
    m = model(nodes, [("x", F, ["N", 3])], [("y", F, ["N", 3])])
    out = run_pass(FOLD, kiln.from_onnx(m))
    ops = [e.op.name for e in post_order(out.main) if isinstance(e, Call) and isinstance(e.op, Op)]
    assert "tensor.shape" in ops
    x = np.ones((5, 3), np.float32)
    np.testing.assert_array_equal(kiln.evaluate(out, {"x": x})[0], x)


def test_constant_of_shape_and_range_fold():
    nodes = [
        helper.make_node("ConstantOfShape", ["shape"], ["w"], value=onnx.numpy_helper.from_array(
            np.array([0.5], np.float32))),
        helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
        helper.make_node("Cast", ["r"], ["rf"], to=onnx.TensorProto.FLOAT),
        helper.make_node("Add", ["x", "w"], ["a"]),
        helper.make_node("Add", ["a", "rf"], ["y"]),
    ]
    inits = [onnx.numpy_helper.from_array(np.array([4], np.int64), "shape")] + [
        onnx.numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
        (("start", 0), ("limit", 4), ("delta", 1))]
    m = model(nodes, [("x", F, [4])], [("y", F, [4])], inits)
    out = run_pass(FOLD, kiln.from_onnx(m))
    ops = [e.op.name for e in post_order(out.main) if isinstance(e, Call) and isinstance(e.op, Op)]
    assert ops == ["math.add", "math.add"]
    x = np.zeros(4, np.float32)
    np.testing.assert_allclose(kiln.evaluate(out, {"x": x})[0], [0.5, 1.5, 2.5, 3.5])


def test_random_ops_are_not_folded():
    nodes = [helper.make_node("RandomNormal", [], ["r"], shape=[3]), helper.make_node("Add", ["x", "r"], ["y"])]
    out = run_pass(FOLD, kiln.from_onnx(model(nodes, [("x", F, [3])], [("y", F, [3])])))
    ops = [e.op.name for e in post_order(out.main) if isinstance(e, Call) and isinstance(e.op, Op)]
    assert any(o.startswith("random.") for o in ops)


def test_light_models_have_no_constant_of_shape_or_range_on_weight_paths():
    import glob
    import os

    light = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    for path in sorted(glob.glob(os.path.join(light, "*.onnx"))):
        out = run_pass(FOLD, kiln.from_onnx(path))
        ops = {e.op.name for e in post_order(out.main) if isinstance(e, Call) and isinstance(e.op, Op)}
        assert not ops & {"tensor.constant_of_shape", "tensor.range"}, os.path.basename(path)

