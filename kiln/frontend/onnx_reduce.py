"""ONNX converters for kiln/op/reduce.py."""
