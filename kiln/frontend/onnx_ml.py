"""ONNX converters for kiln/op/ml.py."""
