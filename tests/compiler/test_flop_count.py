"""flop_count: the recurrent cells and transposed convolutions of the wide set count their multiply-adds."""

import pytest
from onnx import TensorProto, helper

import kiln
from kiln.compiler.flop_count import flop_count
from kiln.models.onnx_builder import GraphBuilder
from kiln.models.rnn import gru, lstm


@pytest.mark.parametrize("batch", [1, 3])
def test_lstm_counts_every_step_and_gate(batch):
    steps, feats, h = 8, 8, 16
    cells = steps * batch * 4 * h * ((feats + h) + (h + h))  # two layers; the second reads the first's h
    assert flop_count(kiln.from_onnx(lstm(batch=batch, seq=steps, features=feats, hidden=h))) == 2 * (
        cells + batch * 10 * h)


def test_bidirectional_gru_counts_both_directions():
    steps, feats, h = 8, 8, 16
    cells = steps * 2 * 3 * h * ((feats + h) + (2 * h + h))  # the second layer reads both directions' h
    assert flop_count(kiln.from_onnx(gru(batch=1, seq=steps, features=feats, hidden=h))) == 2 * (
        cells + 10 * 2 * h)


def test_transposed_conv_counts_each_input_element_against_its_kernel():
    g = GraphBuilder(0)
    g.node("ConvTranspose", ["x", g.weight("w", (4, 3, 2, 2))], "y", kernel_shape=[2, 2], strides=[2, 2])
    model = g.model("t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 5])],
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 10, 10])])
    assert flop_count(kiln.from_onnx(model)) == 2 * (4 * 25) * (3 * 2 * 2)
