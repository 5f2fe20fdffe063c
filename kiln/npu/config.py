"""The accelerator's parameters, as one JSON-able value: the target string `npu-sim` is the default one.

The machine: a matrix unit that multiplies `rows` input vectors of `block_in` elements by a
`block_in` x `block_out` weight block each cycle into `rows` x `block_out` accumulators; a vector
unit of `vector_lanes` lanes; four on-chip buffers (inputs, weights, accumulators, ALU operands), the
input buffer split in `banks` banks of one `block_in`-element word each (word address modulo `banks`);
one DMA engine moving `dma_bytes_per_cycle` after `dma_latency` cycles per transfer; a clock of `clock_mhz`.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from kiln.errors import KilnError

TARGET_KIND = "npu-sim"


class NpuConfigError(KilnError):
    """An accelerator configuration that names an unknown field or a value that is not a positive integer."""


@dataclass(frozen=True)
class NpuConfig:
    """What the compiler may assume of the accelerator (defaults: a VTA-like machine with a 4x16x16 GEMM core)."""

    rows: int = 4
    block_in: int = 16
    block_out: int = 16
    vector_lanes: int = 64  # rows x block_out: the vector unit keeps up with the matrix unit's output rate
    inp_bytes: int = 256 << 10
    wgt_bytes: int = 512 << 10
    acc_bytes: int = 256 << 10
    aux_bytes: int = 256 << 10
    banks: int = 8
    dma_bytes_per_cycle: int = 32
    dma_latency: int = 64
    clock_mhz: int = 1000

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise NpuConfigError(f"npu config field {f.name}={value!r}: expected a positive integer")

    @property
    def macs_per_cycle(self) -> int:
        return self.rows * self.block_in * self.block_out

    def dma_cycles(self, nbytes: int) -> int:
        """One transfer of `nbytes`: the fixed latency plus the bytes at the DMA bandwidth."""
        return self.dma_latency + -(-nbytes // self.dma_bytes_per_cycle)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> NpuConfig:
        """The configuration a JSON object spells; fields it leaves out keep their defaults."""
        given = json.loads(text)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(given) - known)
        if unknown:
            raise NpuConfigError(f"unknown npu config field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**given)

    @classmethod
    def load(cls, path: str | Path) -> NpuConfig:
        return cls.from_json(Path(path).read_text())
