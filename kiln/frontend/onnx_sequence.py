"""ONNX converters for kiln/op/sequence.py."""
