"""The generic tier (kiln.runtime.generic_executor) computes what the reference interpreter computes, on
Kiln's shape-generic kernels: every covered operator, with the geometries that take different C paths."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import kiln
from kiln.errors import KilnError
from kiln.ir.expr import Call, Tuple, TupleGetItem
from kiln.ir.visitor import post_order
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
    _check_executor(GenericExecutor(mod, Target.host()), mod, min_kernel_calls, rtol)


def _check_executor(ex: GenericExecutor, mod, min_kernel_calls: int, rtol: float = 1e-4) -> None:
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


@pytest.mark.parametrize("x_shape, k, attrs", [
    ((1, 5, 13, 37), 3, {"pads": [1, 1, 1, 1]}),  # rows wide enough for 8-lane vectors, and their edges
    ((2, 3, 17, 41), 3, {"strides": [2, 2], "pads": [1, 0, 1, 2]}),  # stride 2: even lanes of two loads
    ((1, 4, 19, 40), 5, {"strides": [3, 3], "pads": [2, 2, 2, 2]}),
    ((1, 2, 23, 31), 3, {"dilations": [2, 3], "pads": [2, 3, 2, 3]}),
    ((1, 3, 3, 5), 5, {"pads": [2, 2, 2, 2]}),  # a window wider than the image
    ((1, 1, 1, 1), 1, {}),
])
def test_depthwise_conv(x_shape, k, attrs):
    c = x_shape[1]
    _check(_model(lambda g, x: _conv(g, x, c, c, k, "c", group=c, **attrs), x_shape), 1)


@pytest.mark.parametrize("cin, cout, k, size, attrs", [
    (7, 13, 3, (29, 31), {"pads": [1, 1, 1, 1]}),  # several tiles of rows and columns, partial ones at the edges
    (3, 5, 7, (23, 23), {"strides": [2, 2], "pads": [3, 3, 3, 3]}),
    (37, 11, 3, (9, 10), {"pads": [0, 1, 2, 1]}),  # depth across two packed blocks (37 * 9 > 256)
    (300, 7, 1, (5, 7), {}),  # a 1x1 conv deeper than one block
    (4, 6, 2, (1, 1), {"pads": [1, 1, 0, 0]}),
    (9, 4, 1, (5, 70), {}),  # fewer output channels than a tile: B streamed row by row, two column blocks
    (3, 8, 3, (9, 70), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),  # stride-2 rows of whole slivers
])
def test_conv_shapes(cin, cout, k, size, attrs):
    _check(_model(lambda g, x: _conv(g, x, cin, cout, k, "c", **attrs), (2, cin, *size)), 1)


def _conv_bn(g: GraphBuilder, x: str, cin: int, cout: int, name: str, **attrs) -> str:
    return g.batch_norm(_conv(g, x, cin, cout, 3, name, pads=[1, 1, 1, 1], **attrs), cout, f"{name}.bn")


@pytest.mark.parametrize("group", [1, 5])
def test_conv_batch_norm_add_relu_is_one_kernel_call(group):
    def build(g, x):
        return g.node("Relu", [g.node("Add", [_conv_bn(g, x, 5, 5, "c", group=group), x], "a")], "r")

    mod = kiln.from_onnx(_model(build, (2, 5, 11, 19)))
    ex = GenericExecutor(mod, Target.host())
    assert len(ex.chains) == 1
    _check_executor(ex, mod, 1)
    assert ex.kernel_calls == 1


def test_conv_clip_and_a_constant_channel_add_fuse():
    def build(g, x):
        y = g.node("Add", [_conv(g, x, 3, 8, 3, "c"), g.weight("bias", (8, 1, 1), 1.0)], "a")
        return g.node("Clip", [y, g.const("lo", np.float32(-0.5)), g.const("hi", np.float32(0.75))], "clip")

    _check(_model(build, (1, 3, 12, 12)), 1)


def test_a_chain_value_read_elsewhere_is_not_fused():
    def build(g, x):
        y = _conv(g, x, 3, 3, 3, "c", pads=[1, 1, 1, 1])
        return g.node("Add", [g.node("Relu", [y], "r"), y], "a")  # the conv's output read twice

    mod = kiln.from_onnx(_model(build, (1, 3, 6, 7)))
    assert GenericExecutor(mod, Target.host()).chains == {}
    _check(_model(build, (1, 3, 6, 7)), 3)


def test_a_residual_that_broadcasts_runs_call_by_call():
    def build(g, x):
        y = _conv(g, x, 3, 4, 1, "c")
        return g.node("Relu", [g.node("Add", [y, g.node("ReduceMean", [x], "m", axes=[1], keepdims=1)], "a")], "r")

    _check(_model(build, (2, 3, 5, 6)), 2)


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


@pytest.mark.parametrize("m", [1, 3, 7])  # dot products (fewer rows than a tile) and tiles
def test_gemm_transposed_weight_with_bias_and_relu(m):
    def build(g, x):
        return g.node("Relu", [g.node("Gemm", [x, g.weight("w", (29, 13)), g.weight("b", (29,), 1.0)], "y",
                                      transB=1)], "r")

    _check(_model(build, (m, 13), rank=2), 1)


def test_a_few_rows_times_a_wide_weight_streams_it():
    _check(_model(lambda g, x: g.node("MatMul", [x, g.weight("w", (13, 300))], "y"), (1, 5, 13), rank=3), 1)


def test_a_gemm_whose_scaling_makes_no_epilogue_runs_call_by_call():
    def build(g, x):
        y = g.node("Gemm", [x, g.weight("w", (13, 6)), g.weight("c", (6,), 1.0)], "y", alpha=0.5)
        return g.node("Relu", [y], "r")

    mod = kiln.from_onnx(_model(build, (7, 13), rank=2))
    ex = GenericExecutor(mod, Target.host())
    assert len(ex.chains) == 1
    _check_executor(ex, mod, 2)


def test_batched_mat_muls_broadcast_and_read_transposed_operands():
    def build(g, x):
        k = g.node("Transpose", [x], "t", perm=[0, 1, 3, 2])
        scores = g.node("MatMul", [x, k], "s")  # [2, 3, 7, 5] @ [2, 3, 5, 7]
        return g.node("MatMul", [scores, g.weight("w", (3, 7, 9))], "y")  # a weight broadcast over the batch

    _check(_model(build, (2, 3, 7, 5)), 2)


def test_mat_mul_bias_and_residual_fuse():
    def build(g, x):
        y = g.node("Add", [g.node("MatMul", [x, g.weight("w", (17, 17))], "mm"), g.weight("b", (17,), 1.0)], "ab")
        return g.node("Add", [x, y], "res")

    _check(_model(build, (2, 5, 17), rank=3), 1)


def test_bert_style_ops():
    def build(g, x):
        y = g.node("Softmax", [x], "sm", axis=-1)
        y = g.node("Mul", [g.node("Erf", [g.node("Div", [y, g.const("two", np.float32(2.0))], "d")], "e"),
                           g.node("Sub", [x, g.weight("s", (23,))], "sub")], "mul")
        return g.node("LayerNormalization", [y, g.weight("gamma", (23,)), g.weight("beta", (23,))], "ln", axis=-1)

    _check(_model(build, (3, 5, 23), rank=3), 6)


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


def test_a_flat_graph_runs_by_its_plan_each_chain_one_step():
    mod = kiln.from_onnx(small_cnn(batch=1))
    ex = GenericExecutor(mod, Target.host())
    assert ex.plan is not None
    chain_calls = sum(len(c.calls) - 1 for c in ex.chains.values())  # calls folded into their chain's last
    nodes = sum(1 for e in post_order(mod.main.body) if isinstance(e, (Call, Tuple, TupleGetItem)))
    assert len(ex.plan.steps) == nodes - chain_calls
    assert all(ex.plan.dead[:-1]) or len(ex.plan.steps) == 1  # values dropped as soon as no step reads them
    _check_executor(ex, mod, len(ex.chains))


@pytest.mark.parametrize("cond", [True, False])
def test_a_graph_with_control_flow_runs_on_the_interpreter(cond):
    def branch(op: str, out: str) -> onnx.GraphProto:
        return helper.make_graph([helper.make_node(op, ["x"], [out])], out, [],
                                 [helper.make_tensor_value_info(out, TensorProto.FLOAT, [3])])

    nodes = [helper.make_node("Relu", ["x0"], ["x"]),
             helper.make_node("If", ["c"], ["y"], then_branch=branch("Relu", "t"), else_branch=branch("Neg", "e"))]
    graph = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                                           helper.make_tensor_value_info("x0", TensorProto.FLOAT, [3])],
                              [_out("y", 1)])
    mod = kiln.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    ex = GenericExecutor(mod, Target.host())
    assert ex.plan is None
    feeds = {"c": np.array(cond), "x0": np.array([-1.0, 0.5, 2.0], np.float32)}
    np.testing.assert_array_equal(ex.run(feeds)[0], kiln.evaluate(mod, feeds)[0])


@pytest.mark.parametrize("op", ["MatMul", "Add", "Mul"])
def test_shapes_that_do_not_fit_get_the_references_error(op):
    f = TensorProto.FLOAT
    graph = helper.make_graph([helper.make_node(op, ["x", "y"], ["z"])], "t",
                              [helper.make_tensor_value_info("x", f, [2, "a"]),
                               helper.make_tensor_value_info("y", f, ["b", 3])], [_out("z", 2)])
    mod = kiln.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    feeds = {"x": np.ones((2, 4), np.float32), "y": np.ones((5, 3), np.float32)}
    with pytest.raises(KilnError):
        GenericExecutor(mod, Target.host()).run(feeds)
