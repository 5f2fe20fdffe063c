"""What the matrix unit is asked to compute: one convolution (a dense layer is a 1x1 one over a row of
pixels) with the vector-unit epilogue fused behind it, and the tile it is cut into."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class EpilogueOp:
    """One vector-unit step on the accumulators: `op` with the immediate `imm`, or with the DRAM tensor
    `tensor`: per-channel (1, 1, 1, C) when `per_channel`, else a tile of the output's shape (a residual)."""

    op: str
    imm: float | int | None = None
    tensor: str | None = None
    per_channel: bool = False


@dataclass(frozen=True)
class ConvSpec:
    """An NHWC convolution: input (n, h, w, cin), weights (kh, kw, cin, cout), pads (top, left, bottom, right)."""

    n: int
    h: int
    w: int
    cin: int
    cout: int
    kh: int
    kw: int
    stride: int
    pads: tuple[int, int, int, int]
    dtype: str = "float32"
    depthwise: bool = False  # one filter per channel (cin == cout), weights (kh, kw, 1, cout): the vector unit's
    pack: int = 1  # > 1: kernel columns packed into input channels (kiln.npu.packing): kw groups of `pack` columns

    @property
    def weight_cin(self) -> int:
        """Input channels per filter."""
        return 1 if self.depthwise else self.cin

    @property
    def out_h(self) -> int:
        return (self.h + self.pads[0] + self.pads[2] - self.kh) // self.stride + 1

    @property
    def out_w(self) -> int:
        return (self.w + self.pads[1] + self.pads[3] - self.kw_span) // self.stride + 1

    @property
    def macs(self) -> int:
        return self.n * self.out_h * self.out_w * self.weight_cin * self.cout * self.kh * self.kw

    @property
    def itemsize(self) -> int:
        return np.dtype(self.dtype).itemsize

    def in_rows(self, out_rows: int) -> int:
        """Input rows (halo included) that `out_rows` output rows read."""
        return (out_rows - 1) * self.stride + self.kh

    @property
    def in_cols(self) -> int:
        return (self.out_w - 1) * self.stride + self.kw_span

    @property
    def col_offsets(self) -> tuple[int, ...]:
        """The input-tile column each kernel column (group, when packed) starts its window at."""
        return tuple(j * self.pack for j in range(self.kw))

    @property
    def kw_span(self) -> int:
        """Tile columns one output pixel's window spans."""
        return (self.kw - 1) * self.pack + 1


@dataclass(frozen=True)
class Tile:
    """Output rows, output channels and input channels per step of the matrix unit."""

    rows: int
    cout: int
    cin: int
