"""Kernel columns packed into input channels, for convolutions with few input channels: a network's
first layer (3 channels) fills 3 of the matrix unit's 16 input lanes, and pays a pass per kernel
offset. Packed, the kw columns of the kernel become kw x cin input channels of a kernel one column
wide: the input tile's channel j * cin + c of pixel u is the input's channel c of pixel u + j (the
DMA gathers it, kiln.npu.isa.Load's `pack`), and the weights (KH, KW, Cin, Cout) are the same bytes
read as (KH, 1, KW * Cin, Cout). The 7x7 stride-2 convolution over 3 channels takes 7 offsets x 2
channel blocks per pixel group instead of 49 x 1; the input moves kw times (each column offset is
read again), which the cost model weighs (kiln.npu.lower_step picks the faster form).

The packed spec is exact: its width is the input's and its right pad is the original's less kw - 1
(negative when the packed input is narrower than the padded one), so out_w, the columns a tile reads
and the left pad the loads start at are those of the original layer.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from kiln.npu.config import NpuConfig
from kiln.npu.conv_spec import ConvSpec


def packed(spec: ConvSpec, config: NpuConfig) -> ConvSpec | None:
    """`spec` with its kernel columns packed into channels, when that takes fewer matrix-unit passes."""
    blocks = lambda channels: -(-channels // config.block_in)  # noqa: E731
    if spec.depthwise or spec.pack > 1 or blocks(spec.kw * spec.cin) >= spec.kw * blocks(spec.cin):
        return None
    top, left, bottom, right = spec.pads
    return dataclasses.replace(spec, cin=spec.kw * spec.cin, kw=1, pads=(top, left, bottom, right - spec.kw + 1),
                               pack=spec.kw)


def packed_weights(weights: np.ndarray) -> np.ndarray:
    """(KH, KW, Cin, Cout) weights as the packed layer's (KH, 1, KW * Cin, Cout)."""
    kh, kw, cin, cout = weights.shape
    return weights.reshape(kh, 1, kw * cin, cout)


def inside_columns(spec: ConvSpec) -> int:
    """Per input row of a tile, the (column, channel) elements inside the image over one input channel:
    the columns it reads, each of the pack column offsets counted (padding moves no bytes)."""
    if spec.pack == 1:
        return min(spec.in_cols, spec.w)
    return sum(max(0, min(spec.w, j - spec.pads[1] + spec.in_cols) - max(0, j - spec.pads[1]))
               for j in range(spec.pack))
