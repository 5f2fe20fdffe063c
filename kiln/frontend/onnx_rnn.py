"""ONNX converters for kiln/op/rnn.py."""
