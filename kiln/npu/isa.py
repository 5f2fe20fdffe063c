"""The accelerator's instructions. A program is one list in program order; the fetch stage hands each
instruction to the queue of its unit (load, compute, store), and the units run decoupled: the only
order between queues is the dependence tokens that `Push` and `Pop` pass along the channels between
them (VTA's decoupled access-execute).

The matrix unit (`compute`) and the vector unit (`vector`) have a queue each, as in NPUs with separate
cube and vector units (Ascend's AI Core): a convolution tile's epilogue on the vector unit overlaps the
next tile's GEMMs, the accumulators double buffered and the hand-off ordered by compute->vector tokens
(the acc slot's reuse by the store's store->compute token). VTA is the counterexample: its GEMM core and
tensor ALU share one in-order compute module, which a program models by making the matrix unit wait for
a vector->compute token after each epilogue (kiln.npu.lower_conv's `Options.overlap_epilogue` off).

Tensors in DRAM are 4-d numpy arrays named in a dict: feature maps NHWC, weights (KH, KW, Cin, Cout),
per-channel vectors (1, 1, 1, C). On chip, a buffer holds tiles in slots: input, accumulator and
operand tiles are (H, W, C) (a load takes one image), weight tiles (KH, KW, Cin, Cout).

A program may also keep tensors on chip (`Held`: graph scheduling for on-chip memory, kiln.npu.onchip).
A held tensor lives in a region of one buffer that the program's slots leave free, and it outlives the
program: the next programs of one run find it there. A Load or Store that names a held tensor instead of
a DRAM one is an on-chip move (the hand-off from one layer's accumulators to the next one's input tiles),
done by the same unit but at the buffers' width (kiln.npu.banks.move_cycles), with no DMA bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

UNITS = ("load", "compute", "vector", "store")
BUFFERS = ("inp", "wgt", "acc", "aux")
CHANNELS = tuple((a, b) for a in UNITS for b in UNITS if a != b and {a, b} != {"load", "store"})
ALU_OPS = ("add", "mul", "max", "min", "shr", "fmul")
POOL_OPS = ("max", "avg")


@dataclass(frozen=True)
class Load:
    """DMA from DRAM `tensor`'s region at `start` of `size` (4-d; parts outside the tensor read as `fill`
    and move no bytes) into `buf` slot `slot`. An input tile is laid out with `pitch` words per pixel and
    `row_pitch` pixels per row (0: dense), which decides the banks the matrix unit reads. With `pack` > 1
    the DMA gathers kernel columns into channels (kiln.npu.packing): the tile's channel j * C + c of pixel
    u is the tensor's channel c of pixel start + u + j (C the tensor's channels; size and the channel start
    count packed channels), one transfer moving each column offset's bytes. With `into`, the DMA writes the
    part at offset `at` of held tensor `into` instead of a slot (the next program's first weights, loaded
    in parts, kiln.npu.prefetch); with `whole`, it writes the part at offset `at` of a slot tile of size
    `whole`, the part at offset 0 starting that tile (weights loaded ahead in parts, kiln.npu.parts)."""

    buf: str
    slot: int
    tensor: str
    start: tuple[int, int, int, int]
    size: tuple[int, int, int, int]
    pitch: int = 0
    row_pitch: int = 0
    fill: float = 0.0  # what the parts outside the tensor read as (a max pool's padding: -inf)
    pack: int = 1
    into: str = ""
    at: tuple[int, int, int, int] = (0, 0, 0, 0)
    whole: tuple[int, int, int, int] | None = None
    unit = "load"


@dataclass(frozen=True)
class Gemm:
    """acc[acc_slot] (+)= window(inp[inp_slot], kh, kw, stride) @ wgt[wgt_slot][kh, kw] on the matrix unit:
    the input window is out_h x out_w pixels starting at (kh, kw * col_step) with step `stride` (col_step:
    kernel columns packed in groups, kiln.npu.packing); `reset` starts the accumulators from zero."""

    inp_slot: int
    wgt_slot: int
    acc_slot: int
    kh: int
    kw: int
    stride: int
    out_h: int
    out_w: int
    reset: bool
    col_step: int = 1
    unit = "compute"


@dataclass(frozen=True)
class DepthwiseMac:
    """acc[acc_slot] (+)= window(inp[inp_slot], kh, kw, stride) * wgt[wgt_slot][kh, kw, 0] on the vector unit:
    a depthwise convolution's kernel offset, one multiply-add per channel of each window pixel."""

    inp_slot: int
    wgt_slot: int
    acc_slot: int
    kh: int
    kw: int
    stride: int
    out_h: int
    out_w: int
    reset: bool
    unit = "vector"


@dataclass(frozen=True)
class Alu:
    """acc[acc_slot] = acc[acc_slot] `op` operand on the vector unit; the operand is the immediate `imm` or
    the tile in aux slot `aux_slot` (broadcast: a (1, 1, C) tile is one value per channel). `shr` is an
    arithmetic shift right rounding half up (int requantization). `fmul` computes in float32 (an int32
    accumulator converted first: the dequantization of an int8 layer's sums); the other ops keep the tile's type."""

    op: str
    acc_slot: int
    imm: float | int | None = None
    aux_slot: int | None = None
    unit = "vector"


@dataclass(frozen=True)
class Dequantize:
    """buf[slot] = float32(buf[slot] - zero_point) * scale on the vector unit, one pass: ONNX's DequantizeLinear of
    an integer accumulator tile, or of an int8 operand tile in the aux buffer (a residual, for an Alu to add)."""

    buf: str  # "acc" or "aux"
    slot: int
    zero_point: int
    scale: float
    unit = "vector"


@dataclass(frozen=True)
class Requantize:
    """acc[acc_slot] = clip(round_half_even(acc / scale) + zero_point, lo, hi) in int32 on the vector unit, one
    pass of its requantization pipeline: ONNX's QuantizeLinear of a float32 accumulator tile."""

    acc_slot: int
    scale: float
    zero_point: int
    lo: int = -128
    hi: int = 127
    unit = "vector"


@dataclass(frozen=True)
class Pool:
    """acc[acc_slot] = the `op` (max or avg) over kh x kw windows with step `stride` of aux[aux_slot] on the
    vector unit (out_h x out_w pixels); an avg divides by the window's size."""

    op: str
    aux_slot: int
    acc_slot: int
    kh: int
    kw: int
    stride: int
    out_h: int
    out_w: int
    unit = "vector"


@dataclass(frozen=True)
class Store:
    """DMA of acc[acc_slot]'s first size[1:] elements into DRAM `tensor` at `start`, cast to its dtype."""

    acc_slot: int
    tensor: str
    start: tuple[int, int, int, int]
    size: tuple[int, int, int, int]
    unit = "store"


@dataclass(frozen=True)
class Push:
    """Unit `unit` sends one token to unit `to` (it has finished what the token stands for)."""

    unit: str
    to: str


@dataclass(frozen=True)
class Pop:
    """Unit `unit` waits for (and takes) one token from unit `frm`."""

    unit: str
    frm: str


@dataclass(frozen=True)
class Held:
    """A tensor of `shape` (NHWC) and `dtype` kept in a region of buffer `buf` while a program runs."""

    tensor: str
    buf: str
    shape: tuple[int, int, int, int]
    dtype: str

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * np.dtype(self.dtype).itemsize


Instruction = Load | Gemm | DepthwiseMac | Alu | Dequantize | Requantize | Pool | Store | Push | Pop


@dataclass
class Program:
    """An instruction stream and how it splits each buffer into equal slots (a tile must fit its slot);
    the slots share what the held tensors leave of a buffer."""

    name: str
    instructions: list[Instruction]
    slots: dict[str, int]
    dtype: np.dtype = np.dtype("float32")  # the data type of input and weight tiles
    held: tuple[Held, ...] = ()

    def held_bytes(self, buf: str) -> int:
        """Bytes of buffer `buf` the held tensors take."""
        return sum(h.nbytes for h in self.held if h.buf == buf)

    def queues(self) -> dict[str, list[Instruction]]:
        """The fetch stage: each unit's instructions, in program order."""
        out: dict[str, list[Instruction]] = {u: [] for u in UNITS}
        for ins in self.instructions:
            out[ins.unit].append(ins)
        return out
