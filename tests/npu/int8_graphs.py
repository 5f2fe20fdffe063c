"""QDQ graphs for the int8 tests: DequantizeLinear -> layer -> QuantizeLinear with power-of-two scales, so
that the interpreter's float arithmetic is exact too and 'bit-exact' compares two exact results."""

import numpy as np

from kiln.ir import Constant, Var
from kiln.ir.types import TensorType
from kiln.op import get_op

RANGES = {"uint8": (0, 255), "int8": (-128, 127)}


def quantize(x, scale: float, zp: int, dtype: str):
    return get_op("quant.quantize_linear")(x, Constant(np.float32(scale)), Constant(np.array(zp, dtype)))


def dequantize(x, scale: float, zp: int):
    return get_op("quant.dequantize_linear")(x, Constant(np.float32(scale)), Constant(np.array(zp, x.type.dtype)))


def int8_weights(rng, shape: tuple[int, ...], axis: int):
    """DequantizeLinear of random int8 weights with one power-of-two scale per channel along `axis`."""
    values = rng.integers(-127, 128, shape).astype(np.int8)
    scales = (2.0 ** -rng.integers(6, 9, shape[axis])).astype(np.float32)
    return get_op("quant.dequantize_linear")(Constant(values), Constant(scales),
                                             Constant(np.zeros(shape[axis], np.int8)), axis=axis), float(scales.max())


def quantized_input(rng, name: str, shape: tuple[int, ...], dtype: str):
    """A quantized input Var, its random zero point and scale, and a feed for it."""
    lo, hi = RANGES[dtype]
    zp = int(rng.integers(lo, hi + 1))
    feed = rng.integers(lo, hi + 1, shape).astype(dtype)
    return Var(name, TensorType(shape, dtype)), zp, 2.0 ** -int(rng.integers(3, 6)), feed


def output_scale(x_scale: float, w_scale: float, terms: int) -> float:
    """A power of two putting the accumulators' typical size near the middle of the 8-bit range (some saturate)."""
    return x_scale * w_scale * 2.0 ** round(np.log2(np.sqrt(terms) * 80 * 70 / 40))
