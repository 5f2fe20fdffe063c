"""ONNX converters for kiln/op/vision.py."""
