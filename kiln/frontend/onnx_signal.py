"""ONNX converters for kiln/op/signal.py."""
