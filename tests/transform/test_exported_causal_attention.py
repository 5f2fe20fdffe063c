"""The causal attention PyTorch exports for scaled_dot_product_attention(is_causal=True): the mask is
built from the scores' shape (Shape, Slice, Expand, Trilu, Equal, Where -> 0 / -inf) and added, and
sqrt(scale) multiplies both q and k^T. The standard pipeline folds the mask into a constant, then
SimplifyInference recognizes causal nn.attention; the compiled model matches ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import kiln
from kiln.ir.expr import Call
from kiln.ir.visitor import post_order
from kiln.models.onnx_builder import GraphBuilder
from kiln.transform.pipeline import optimize

S, H, D = 7, 2, 4  # a prime sequence length


def _sdpa_model(mask_value: float = float("-inf"), upper: int = 0):
    g = GraphBuilder(seed=3)
    heads = g.const("heads", np.array([1, S, H, D], np.int64))

    def project(name: str, perm: list[int]) -> str:
        y = g.node("MatMul", ["x", g.weight(f"{name}.w", (H * D, H * D))], f"{name}.mm")
        y = g.node("Reshape", [y, heads], f"{name}.split")
        return g.node("Transpose", [y], f"{name}.heads", perm=perm)

    q, k, v = project("q", [0, 2, 1, 3]), project("k", [0, 2, 3, 1]), project("v", [0, 2, 1, 3])
    # scale = 1 / sqrt(D) from the shape, applied as sqrt(scale) to q and to k^T
    dims = g.node("Shape", [q], "q.shape")
    d = g.node("Slice", [dims, g.const("minus1", np.array([-1], np.int64)),
                         g.const("big", np.array([2**62], np.int64))], "d")
    d = g.node("Cast", [d], "d.float", to=TensorProto.FLOAT)
    scale = g.node("Div", [g.const("one", np.array(1.0, np.float32)), g.node("Sqrt", [d], "sqrt_d")], "scale")
    root = g.node("Sqrt", [scale], "root")
    q, k = g.node("Mul", [q, root], "q.scaled"), g.node("Mul", [k, root], "k.scaled")
    # mask: where(tril(ones(L, S)) == 0, mask_value, 0), shaped from q and k
    lq = g.node("Slice", [dims, g.const("minus2", np.array([-2], np.int64)), g.const("minus1b", np.array([-1], np.int64))],
                "lq")
    ls = g.node("Slice", [g.node("Shape", [v], "v.shape"), g.const("minus2b", np.array([-2], np.int64)),
                          g.const("minus1c", np.array([-1], np.int64))], "ls")
    ones = g.node("Expand", [g.const("onef", np.array(1.0, np.float32)), g.node("Concat", [lq, ls], "ls2", axis=0)],
                  "ones")
    tril = g.node("Trilu", [ones], "tril", upper=upper)
    drop = g.node("Equal", [tril, g.const("zero", np.array(0.0, np.float32))], "drop")
    mask = g.node("Where", [drop, g.const("fill", np.array(mask_value, np.float32)),
                            g.const("zerof", np.array(0.0, np.float32))], "mask")
    scores = g.node("Add", [g.node("MatMul", [q, k], "scores"), mask], "masked")
    y = g.node("MatMul", [g.node("Softmax", [scores], "probs", axis=-1), v], "attn")
    y = g.node("Transpose", [y], "merge", perm=[0, 2, 1, 3])
    y = g.node("Reshape", [y, g.const("flat", np.array([1, S, H * D], np.int64))], "y")
    return g.model("sdpa", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, S, H * D])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, S, H * D])])


def _attention_calls(model) -> list[Call]:
    mod = optimize(kiln.from_onnx(model), opt_level=2)
    return [e for e in post_order(mod.main.body) if isinstance(e, Call) and getattr(e.op, "name", "") in
            ("nn.attention", "reduce.softmax")]


def _check_against_ort(model) -> None:
    ort = pytest.importorskip("onnxruntime")
    x = np.random.default_rng(0).standard_normal((1, S, H * D)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = kiln.build(kiln.from_onnx(model), opt_level=2).run({"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fill", [float("-inf"), -1e9])
def test_exported_causal_mask_becomes_causal_attention(fill):
    model = _sdpa_model(fill)
    (call,) = _attention_calls(model)
    assert call.op.name == "nn.attention" and call.attrs.is_causal == 1 and len(call.args) == 3
    _check_against_ort(model)


def test_an_upper_triangle_mask_stays_an_added_mask():
    model = _sdpa_model(upper=1)  # keeps the strict upper triangle: not causal
    (call,) = _attention_calls(model)
    assert call.op.name == "nn.attention" and call.attrs.is_causal == 0 and len(call.args) == 4
    _check_against_ort(model)


def test_a_mask_that_leaves_probability_is_not_causal():
    model = _sdpa_model(-1.0)
    (call,) = _attention_calls(model)
    assert call.attrs.is_causal == 0 and len(call.args) == 4
    _check_against_ort(model)
