"""Registry-test cases (te eval against the references) for ConvInteger and DynamicQuantizeLinear
(compiled variants, and narrow-dtype quantization: test_quant_narrow.py)."""

from __future__ import annotations

import numpy as np

from tests.topi.harness import rand


def _full(shape, dtype: str, rng) -> np.ndarray:
    info = np.iinfo(dtype)
    return rand(shape, dtype, rng, int(info.min), int(info.max))


def _conv_integer(rng):
    from tests.topi.cases import A

    out = []
    for xt, wt in (("uint8", "uint8"), ("int8", "int8"), ("uint8", "int8")):
        x, w = _full((2, 3, 5, 7), xt, rng), _full((4, 3, 3, 2), wt, rng)
        xz, wz = _full((), xt, rng), _full((4,), wt, rng)
        out += [(A("nn.conv_integer", pads=(1, 0, 1, 1), strides=(1, 2)), [x, w, xz, wz], ()),
                (A("nn.conv_integer", group=3, dilations=(2, 1)), [x, _full((3, 1, 2, 2), wt, rng), None, None], ())]
    return out


def _dynamic_quantize_linear(rng):
    xs = [rand((3, 7), "float32", rng), np.abs(rand((5,), "float32", rng)) + 1, -np.abs(rand((1, 3), "float32", rng)),
          np.zeros((2, 2), np.float32), np.array(0.75, np.float32)]
    return [(None, [x], ()) for x in xs]


def QUANT_NARROW_CASES() -> dict:
    return {"nn.conv_integer": _conv_integer, "quant.dynamic_quantize_linear": _dynamic_quantize_linear}
