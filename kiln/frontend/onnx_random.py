"""ONNX converters for kiln/op/random.py."""
