"""ONNX converters for kiln/op/tensor.py."""
