"""ONNX converters for kiln/op/train.py."""
