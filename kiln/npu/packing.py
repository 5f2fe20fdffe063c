"""Kernel columns packed into input channels, for convolutions with few input channels: a network's
first layer (3 channels) fills 3 of the matrix unit's 16 input lanes, and pays a pass per kernel
offset. Packed by p, each group of p kernel columns becomes p x cin input channels: the input tile's
channel j * cin + c of pixel u is the input's channel c of pixel u + j (the DMA gathers it,
kiln.npu.isa.Load's `pack`), and kernel column group g reads the tile from column g * p
(ConvSpec.col_offsets). The weights (KH, KW, Cin, Cout), padded with zero columns to a multiple of p,
are the same bytes read as (KH, KW / p, p * Cin, Cout). Resnet18's 7x7 stride-2 stem over 3 channels
packed by 4 takes 7 x 2 passes per pixel group instead of 49, with one word per input pixel (packed
by 7 it would take as many passes with two words, a tile too wide for the input buffer at 224x224);
the input moves p times (each column offset is read again), which the cost model weighs
(kiln.npu.lower_step picks the faster form).

The packed spec is exact: its width is the input's and its right pad is the original's less the
columns the groups span beyond the kernel's, so out_w and the left pad the loads start at are the
original layer's.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from kiln.npu.config import NpuConfig
from kiln.npu.conv_spec import ConvSpec


def packed(spec: ConvSpec, config: NpuConfig) -> ConvSpec | None:
    """`spec` packed by the factor that takes the fewest matrix-unit passes (the smallest such factor:
    it moves the fewest bytes); None when no factor takes fewer passes than the layer itself."""
    if spec.depthwise or spec.pack > 1:
        return None

    def passes(p: int) -> int:
        return -(-spec.kw // p) * -(-p * spec.cin // config.block_in)

    best = min(range(1, spec.kw + 1), key=lambda p: (passes(p), p))
    if best == 1:
        return None
    groups = -(-spec.kw // best)
    top, left, bottom, right = spec.pads
    span = (groups - 1) * best + 1
    return dataclasses.replace(spec, cin=best * spec.cin, kw=groups, pads=(top, left, bottom, right - spec.kw + span),
                               pack=best)


def packed_weights(weights: np.ndarray, pack: int) -> np.ndarray:
    """(KH, KW, Cin, Cout) weights as those of the layer packed by `pack`: (KH, groups, pack * Cin, Cout)."""
    kh, kw, cin, cout = weights.shape
    groups = -(-kw // pack)
    padded = np.zeros((kh, groups * pack, cin, cout), weights.dtype)
    padded[:, :kw] = weights
    return padded.reshape(kh, groups, pack * cin, cout)


def inside_columns(spec: ConvSpec) -> int:
    """Per input row of a tile, the (column, channel) elements inside the image over one input channel:
    the columns it reads, each of the pack column offsets counted (padding moves no bytes)."""
    if spec.pack == 1:
        return min(spec.in_cols, spec.w)
    return sum(max(0, min(spec.w, j - spec.pads[1] + spec.in_cols) - max(0, j - spec.pads[1]))
               for j in range(spec.pack))
