"""Groups that used to run on the host now compile: data-dependent output sizes (unique, non-zero,
top-k with a tensor K, NMS) through the runtime library's contract, value-dependent sizes (Reshape
by a shape input), tuple fields passed into a group, Resize by constant scales, and Attention.
One build serves several input sizes (symbolic dims); results match kiln.evaluate."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

import kiln
from kiln.compiler.lower import build_graph_executor as build
from kiln.frontend.onnx import from_onnx
from kiln.ir import Function, IRModule, Var
from kiln.ir.dtype import from_numpy
from kiln.ir.types import SizeVar, TensorType, TupleType
from kiln.models import bert_tiny
from kiln.op import get_op
from kiln.runtime.executor import primitive_functions
from tests.codegen.conftest import requires_gcc
from tests.helpers import I64, F, model

pytestmark = requires_gcc
rng = np.random.default_rng(3)



def _matches(mod, feeds_list, tol=1e-5):
    cm = build(mod)
    assert cm.host_groups == [], cm.host_groups
    for feeds in feeds_list:
        want, got = kiln.evaluate(mod, feeds), cm.run(feeds)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=tol, atol=tol)
    return cm


def _ints(*shape, high=4):
    return rng.integers(0, high, size=shape).astype(np.float32)


def test_unique_non_zero_top_k_with_symbolic_sizes():
    nodes = [helper.make_node("Unique", ["x"], ["u", "idx", "inv", "cnt"], sorted=1),
             helper.make_node("NonZero", ["x"], ["nz"]),
             helper.make_node("TopK", ["x", "k"], ["tv", "ti"], axis=1)]
    outs = [("u", F, ["U"]), ("idx", I64, ["U"]), ("inv", I64, ["V"]), ("cnt", I64, ["U"]), ("nz", I64, [2, "Z"]),
            ("tv", F, ["N", "K"]), ("ti", I64, ["N", "K"])]
    mod = from_onnx(model(nodes, [("x", F, ["N", "M"]), ("k", I64, [1])], outs))
    feeds = [{"x": _ints(n, m), "k": np.array([k], np.int64)} for n, m, k in ((3, 5, 2), (6, 4, 4), (1, 7, 0))]
    _matches(mod, feeds)


def test_non_max_suppression_with_symbolic_boxes():
    nodes = [helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou"], ["sel"])]
    inits = [numpy_helper.from_array(np.array([3], np.int64), "max_out"),
             numpy_helper.from_array(np.array([0.5], np.float32), "iou")]
    mod = from_onnx(model(nodes, [("boxes", F, [1, "B", 4]), ("scores", F, [1, 2, "B"])], [("sel", I64, ["S", 3])], inits))

    def feeds(n):
        corners = rng.uniform(0, 4, (1, n, 2)).astype(np.float32)
        boxes = np.concatenate([corners, corners + rng.uniform(0.5, 2, (1, n, 2)).astype(np.float32)], axis=2)
        return {"boxes": boxes, "scores": rng.uniform(0, 1, (1, 2, n)).astype(np.float32)}

    _matches(mod, [feeds(6), feeds(11), feeds(1)])


def test_reshape_and_tile_by_value():
    """The output sizes come from the shape/repeats values (the group's type relations)."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("Relu", ["r"], ["y"]),
             helper.make_node("Tile", ["x", "reps"], ["t"]), helper.make_node("Neg", ["t"], ["z"])]
    mod = from_onnx(model(nodes, [("x", F, ["N", 6]), ("shape", I64, [2]), ("reps", I64, [2])],
                          [("y", F, ["R", "C"]), ("z", F, ["P", "Q"])]))
    feeds = [{"x": rng.standard_normal((n, 6)).astype(np.float32), "shape": np.array(s, np.int64),
              "reps": np.array(r, np.int64)} for n, s, r in ((2, [3, 4], [2, 1]), (3, [-1, 2], [1, 3]))]
    _matches(mod, feeds)


def test_split_fields_feed_a_group_as_tensors():
    """TopK's tuple is made outside the group that reads its fields: the group takes the fields."""
    nodes = [helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=-1),
             helper.make_node("Cast", ["i"], ["fi"], to=F), helper.make_node("Add", ["v", "fi"], ["y"])]
    inits = [numpy_helper.from_array(np.array([3], np.int64), "k")]
    mod = from_onnx(model(nodes, [("x", F, ["N", 8])], [("y", F, ["N", 3])], inits))
    cm = _matches(mod, [{"x": rng.standard_normal((n, 8)).astype(np.float32)} for n in (2, 5)])
    for fn in primitive_functions(cm.mod):
        assert not any(isinstance(p.type, TupleType) for p in fn.params)


def test_resize_by_constant_scales():
    inits = [numpy_helper.from_array(np.array([0, 0, 0.1, 0.2, 1, 1, 0.9, 0.8], np.float32), "roi"),
             numpy_helper.from_array(np.array([1, 1, 2, 1.5], np.float32), "scales")]
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["a"], mode="linear"),
             helper.make_node("Resize", ["x", "roi", "scales"], ["b"], mode="nearest",
                       coordinate_transformation_mode="tf_crop_and_resize")]
    mod = from_onnx(model(nodes, [("x", F, ["N", 2, 4, 6])], [("a", F, ["N", 2, 8, 9]), ("b", F, ["N", 2, 8, 9])], inits))
    _matches(mod, [{"x": rng.standard_normal((n, 2, 4, 6)).astype(np.float32)} for n in (1, 3)], tol=1e-5)


def _attention_mod(q, k, v, mask=None, **attrs):
    names = ("q", "k", "v", "mask")
    arrays = [a for a in (q, k, v, mask) if a is not None]
    vs = [Var(n, TensorType(tuple(SizeVar("B") if j == 0 and n != "mask" else d for j, d in enumerate(a.shape)),
                            from_numpy(a.dtype))) for n, a in zip(names, arrays)]
    call = get_op("nn.attention")(*vs, **attrs)
    return IRModule({"main": Function(tuple(vs), call)}), [dict(zip(names, arrays))]


@pytest.mark.parametrize("case", [
    dict(shape=((2, 4, 5, 8), (2, 4, 7, 8), (2, 4, 7, 6))),
    dict(shape=((2, 4, 5, 8), (2, 2, 7, 8), (2, 2, 7, 8)), is_causal=1, scale=0.3),  # GQA, causal
    dict(shape=((2, 4, 5, 8), (2, 1, 5, 8), (2, 1, 5, 8)), mask="bool", qk_matmul_output_mode=3),
    dict(shape=((2, 4, 5, 8), (2, 4, 6, 8), (2, 4, 6, 8)), mask="float", softcap=2.0, qk_matmul_output_mode=1),
    dict(shape=((2, 5, 32), (2, 6, 16), (2, 6, 16)), q_num_heads=4, kv_num_heads=2, mask="float"),  # 3-D
    dict(shape=((2, 4, 6, 8), (2, 4, 6, 8), (2, 4, 6, 8)), left_window_size=2, right_window_size=1,
         qk_matmul_output_mode=2),
])
def test_attention_matches_its_reference(case):
    case = dict(case)
    qs, ks, vs = case.pop("shape")
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in (qs, ks, vs))
    kind = case.pop("mask", None)
    sq, skv = qs[-2] if len(qs) == 4 else qs[1], ks[-2] if len(ks) == 4 else ks[1]
    mask = None
    if kind == "bool":
        mask = rng.uniform(size=(sq, skv)) > 0.3
        mask[1] = False  # a fully masked row gives zeros
    elif kind == "float":
        mask = rng.standard_normal((1, 1, sq, skv)).astype(np.float32)
        mask[..., 0, :] = -np.inf
    mod, feeds = _attention_mod(q, k, v, mask, **case)
    _matches(mod, feeds, tol=1e-5)


def test_bert_tiny_compiles_without_host_groups():
    mod = from_onnx(bert_tiny())
    ids = [rng.integers(0, 100, size=(n, 16)).astype(np.int64) for n in (1, 3)]
    _matches(mod, [{mod.input_names[0]: x} for x in ids], tol=1e-4)

