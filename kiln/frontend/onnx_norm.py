"""ONNX converters for kiln/op/norm.py."""
