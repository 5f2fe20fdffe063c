"""A small residual CNN as an ONNX model: the default model of `kiln demo`.

conv-bn-relu, a residual block, max-pool, global average pool, a dense layer and softmax: the
shapes of a real image classifier at toy size, so every stage of Kiln has something to do.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def small_cnn(seed: int = 0, batch: int | str = "N", size: int = 32, classes: int = 10) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    inits: list[TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def weight(name: str, shape: tuple[int, ...], scale: float | None = None) -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        s = scale if scale is not None else np.sqrt(2.0 / max(fan_in, 1))
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * s).astype(np.float32), name))
        return name

    def conv_bn_relu(x: str, cin: int, cout: int, k: int, name: str, relu: bool = True) -> str:
        w = weight(f"{name}.w", (cout, cin, k, k))
        nodes.append(helper.make_node("Conv", [x, w], [f"{name}.conv"], name=f"{name}/conv",
                                      kernel_shape=[k, k], pads=[k // 2] * 4))
        bn = [weight(f"{name}.gamma", (cout,), 0.1), weight(f"{name}.beta", (cout,), 0.1),
              weight(f"{name}.mean", (cout,), 0.1)]
        inits.append(numpy_helper.from_array(rng.uniform(0.5, 1.5, cout).astype(np.float32), f"{name}.var"))
        out = f"{name}.bn"
        nodes.append(helper.make_node("BatchNormalization", [f"{name}.conv", *bn, f"{name}.var"], [out],
                                      name=f"{name}/bn", epsilon=1e-5))
        if relu:
            nodes.append(helper.make_node("Relu", [out], [f"{name}.relu"], name=f"{name}/relu"))
            out = f"{name}.relu"
        return out

    x = conv_bn_relu("image", 3, 16, 3, "stem")
    y = conv_bn_relu(x, 16, 16, 3, "block1a")
    y = conv_bn_relu(y, 16, 16, 3, "block1b", relu=False)
    nodes.append(helper.make_node("Add", [x, y], ["block1.add"], name="block1/add"))
    nodes.append(helper.make_node("Relu", ["block1.add"], ["block1.out"], name="block1/relu"))
    nodes.append(helper.make_node("MaxPool", ["block1.out"], ["pool"], name="pool", kernel_shape=[2, 2],
                                  strides=[2, 2]))
    z = conv_bn_relu("pool", 16, 32, 3, "block2")
    nodes.append(helper.make_node("GlobalAveragePool", [z], ["gap"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="flatten", axis=1))
    w = weight("fc.w", (classes, 32))
    b = weight("fc.b", (classes,), 0.01)
    nodes.append(helper.make_node("Gemm", ["flat", w, b], ["logits"], name="fc", transB=1))
    nodes.append(helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=1))
    graph = helper.make_graph(
        nodes, "kiln_small_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, 3, size, size])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [batch, classes])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="kiln")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
