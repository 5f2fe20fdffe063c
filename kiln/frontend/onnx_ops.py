"""Imports every family's ONNX converters, which register themselves."""

import kiln.op  # noqa: F401  (every operator registered first)
from kiln.frontend import (  # noqa: F401
                           onnx_attention,
                           onnx_control,
                           onnx_elemwise,
                           onnx_linalg,
                           onnx_ml,
                           onnx_nn,
                           onnx_norm,
                           onnx_quant,
                           onnx_quant_contrib,
                           onnx_random,
                           onnx_reduce,
                           onnx_rnn,
                           onnx_sequence,
                           onnx_signal,
                           onnx_string,
                           onnx_tensor,
                           onnx_train,
                           onnx_vision,
)
