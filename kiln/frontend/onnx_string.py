"""ONNX converters for kiln/op/string.py."""
