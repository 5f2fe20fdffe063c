"""ONNX converters for kiln/op/attention.py."""
