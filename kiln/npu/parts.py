"""A weight tile loaded ahead in parts: one long DMA holds up every load queued behind it (the next
input tiles), while parts of about PART_CYCLES of DMA, one behind each of the steps that overlap it,
each hide behind one step's compute. Used by the in-kernel weight load of the next output-channel tile
(kiln.npu.lower_conv) and the cross-kernel prefetch (kiln.npu.prefetch)."""

from __future__ import annotations

from kiln.npu.config import NpuConfig

PART_CYCLES = 256  # about the DMA cycles of one part of a weight tile loaded ahead


def channel_parts(cin: int, nbytes: int, places: int, config: NpuConfig) -> list[tuple[int, int]]:
    """(first input channel, channels) of each part of a weight tile of `cin` input channels and `nbytes`
    spread over at most `places` steps; one part when there is no place or the tile is small."""
    count = max(1, min(places, config.dma_cycles(nbytes) // PART_CYCLES, cin))
    step = -(-cin // count)
    return [(c0, min(step, cin - c0)) for c0 in range(0, cin, step)]
