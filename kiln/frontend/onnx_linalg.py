"""ONNX converters for kiln/op/linalg.py."""
