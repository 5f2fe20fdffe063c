"""Imports every family's ONNX converters, which register themselves."""

from kiln.frontend import onnx_elemwise  # noqa: F401
