"""ONNX converters for kiln/op/control.py."""
