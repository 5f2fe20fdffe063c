"""ONNX converters for kiln/op/train.py (domain ai.onnx.preview.training)."""

from __future__ import annotations

from kiln.frontend.onnx import simple

TRAINING = "ai.onnx.preview.training"

simple("Adagrad", "train.adagrad", domain=TRAINING)
simple("Adam", "train.adam", domain=TRAINING)
simple("Momentum", "train.momentum", domain=TRAINING)
