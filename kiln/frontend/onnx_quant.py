"""ONNX converters for kiln/op/quant.py."""
