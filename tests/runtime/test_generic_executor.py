"""The generic tier (kiln.runtime.generic_executor) computes what the reference interpreter computes, on
Kiln's shape-generic kernels: every covered operator, with the geometries that take different C paths."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import kiln
from kiln.models import mlp, mobilenet_v2, small_cnn
from kiln.models.onnx_builder import GraphBuilder
from kiln.runtime.generic_executor import GenericExecutor
from kiln.target import Target


def _out(name: str, rank: int, elem: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, [None] * rank)


def _model(build, x_shape: tuple[int, ...], rank: int = 4) -> onnx.ModelProto:
    g = GraphBuilder(0)
    y = build(g, "x")
    graph = helper.make_graph(g.nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [_out(y, rank)], g.inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _check(model: onnx.ModelProto, min_kernel_calls: int, rtol: float = 1e-4) -> None:
    mod = kiln.from_onnx(model)
    ex = GenericExecutor(mod, Target.host())
    rng = np.random.default_rng(1)
    feeds = {p.name: rng.standard_normal([d if isinstance(d, int) else 2 for d in p.type.shape]).astype(np.float32)
             for p in mod.main.params}
    got, want = ex.run(feeds), kiln.evaluate(mod, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-4)
    assert ex.kernel_calls >= min_kernel_calls


def _conv(g: GraphBuilder, x: str, cin: int, cout: int, k: int, name: str, **attrs) -> str:
    group = attrs.get("group", 1)
    return g.node("Conv", [x, g.weight(f"{name}.w", (cout, cin // group, k, k)), g.weight(f"{name}.b", (cout,), 0.1)],
                  name, kernel_shape=[k, k], **attrs)


@pytest.mark.parametrize("attrs", [
    {"pads": [1, 1, 1, 1]},
    {"strides": [2, 2], "pads": [0, 1, 2, 1]},
    {"dilations": [2, 2], "pads": [2, 2, 2, 2]},
    {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
    {"group": 2, "pads": [1, 1, 1, 1]},
    {"group": 6, "pads": [1, 1, 1, 1]},  # depthwise
])
def test_conv_geometries(attrs):
    _check(_model(lambda g, x: _conv(g, x, 6, 6 if attrs.get("group") == 6 else 10, 3, "c", **attrs),
                  (2, 6, 9, 11)), 1)


def test_one_by_one_conv_reads_the_image_as_the_gemm_operand():
    _check(_model(lambda g, x: _conv(g, x, 5, 7, 1, "c"), (1, 5, 6, 13)), 1)


@pytest.mark.parametrize("op, attrs", [
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("AveragePool", {"kernel_shape": [2, 3], "strides": [2, 2], "ceil_mode": 1}),
])
def test_pooling(op, attrs):
    _check(_model(lambda g, x: g.node(op, [x], "p", **attrs), (2, 3, 9, 10)), 1)


@pytest.mark.parametrize("attrs", [{}, {"transA": 1}, {"transB": 1, "alpha": 0.5, "beta": 2.0}])
def test_gemm(attrs):
    def build(g, x):
        a = g.node("Transpose", [x], "t", perm=[1, 0]) if attrs.get("transA") else x
        w = g.weight("w", (19, 13) if attrs.get("transB") else (13, 19))
        return g.node("Gemm", [a, w, g.weight("c", (19,), 1.0)], "y", **attrs)

    _check(_model(build, (7, 13), rank=2), 1)


def test_mat_mul_of_a_batched_left_operand():
    _check(_model(lambda g, x: g.node("MatMul", [x, g.weight("w", (11, 17))], "y"), (2, 3, 11), rank=3), 1)


def test_relu_add_batch_norm_global_pool_and_a_fallback():
    def build(g, x):
        y = g.batch_norm(x, 4, "bn")
        y = g.node("Add", [g.node("Relu", [y], "r"), x], "a")
        y = g.node("Sigmoid", [y], "s")  # not covered: the reference runs it
        return g.node("GlobalAveragePool", [y], "gap")

    _check(_model(build, (2, 4, 5, 6)), 4)


def test_max_pool_indices_read_run_on_the_reference():
    g = GraphBuilder(0)
    g.nodes.append(helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2], strides=[2, 2]))
    graph = helper.make_graph(g.nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 2, 4, 4))],
                              [_out("y", 4), _out("i", 4, TensorProto.INT64)])
    _check(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), 0)


@pytest.mark.parametrize("model, calls", [(mlp(batch=3), 3), (small_cnn(batch=2), 8),
                                          (mobilenet_v2(batch=1, size=64), 50)])
def test_built_in_models(model, calls):
    _check(model, calls)
