"""ONNX converters for kiln/op/signal.py."""

from __future__ import annotations

import numpy as np

from kiln.frontend.onnx import Node, call, converter, onnx_attrs_to
from kiln.ir import dtype as dt
from kiln.ir.expr import Constant


@converter("DFT")
def _dft(node: Node):
    """Opset 17 took `axis` as an attribute (default 1); opset 20 takes it as an input (default -2)."""
    inputs = list(node.inputs)
    if node.opset < 20:
        inputs = (inputs + [None])[:2] + [Constant(np.array(node.attrs.get("axis", 1), np.int64))]
    attrs = onnx_attrs_to("signal.dft", node, drop=("axis",))
    return call("signal.dft", node, inputs, attrs)


@converter("STFT")
def _stft(node: Node):
    return call("signal.stft", node, node.inputs, onnx_attrs_to("signal.stft", node))


def _generator(op_name: str):
    """Converter for ops whose output dtype is the `output_datatype` enum attribute."""

    def conv(node: Node):
        out = dt.from_onnx(node.attrs.get("output_datatype", 1))
        return call(op_name, node, node.inputs, onnx_attrs_to(op_name, node, output_datatype=out))

    return conv


for _onnx, _kiln in (("HannWindow", "signal.hann_window"), ("HammingWindow", "signal.hamming_window"),
                     ("BlackmanWindow", "signal.blackman_window"),
                     ("MelWeightMatrix", "signal.mel_weight_matrix")):
    converter(_onnx)(_generator(_kiln))
