"""ONNX converters for kiln/op/nn.py."""
