"""Where the matrix unit's input reads land in the banked input buffer, and what their conflicts cost.

Each cycle the matrix unit reads `rows` input words (one block of input channels of `rows` consecutive
output pixels' input pixels). Pixel (h, w) of a tile laid out with `pitch` words per pixel and
`row_pitch` pixels per row starts at word (h * row_pitch + w) * pitch; a word lives in bank
address % banks. Reads of one cycle that meet in a bank serialize: a group of reads costs as many
cycles as its most-used bank is read. The simulator and the layout search share this one count.

An on-chip move (a held tensor's hand-off, kiln.npu.isa.Held) reads and writes whole words at
consecutive addresses, one word per bank per cycle: it meets no bank twice in a cycle whatever the
layout, so it has no conflicts and costs its words over the banks.
"""

from __future__ import annotations

import functools

import numpy as np


@functools.lru_cache(maxsize=4096)
def read_cycles(row_pitch: int, pitch: int, kh: int, kw: int, stride: int, out_h: int, out_w: int, rows: int,
                banks: int) -> tuple[int, int]:
    """(cycles, conflicts) of one pass of the matrix unit over an out_h x out_w window at offset (kh, kw):
    cycles per input-channel block and output-channel block; conflicts are the cycles lost to banks."""
    oh, ow = np.divmod(np.arange(out_h * out_w), out_w)
    address = ((oh * stride + kh) * row_pitch + (ow * stride + kw)) * pitch
    groups = -(-address.size // rows)
    group = np.arange(address.size) // rows
    counts = np.bincount(group * banks + address % banks, minlength=groups * banks).reshape(groups, banks)
    worst = counts.max(axis=1)
    cycles = int(worst.sum())
    return cycles, cycles - groups


def layout_conflicts(row_pitch: int, pitch: int, kernel: tuple[int, int], stride: int, out_h: int, out_w: int,
                     rows: int, banks: int) -> int:
    """Conflict cycles of every (kh, kw) pass of a convolution tile, per channel block pair."""
    return sum(read_cycles(row_pitch, pitch, kh, kw, stride, out_h, out_w, rows, banks)[1]
               for kh in range(kernel[0]) for kw in range(kernel[1]))


@functools.lru_cache(maxsize=1024)
def conflict_free_layout(width: int, words: int, kernel: tuple[int, int], stride: int, out_h: int, out_w: int,
                         rows: int, banks: int) -> tuple[int, int]:
    """The (pitch, row_pitch) of a tile `width` pixels wide with `words` words per pixel whose matrix-unit
    reads meet no bank twice in a cycle, padding as little as possible; the fewest conflicts if none is free."""
    layouts = sorted(((width + pad) * (words + extra), words + extra, width + pad)
                     for extra in range(banks) for pad in range(banks))
    best: tuple[int, int, int] | None = None
    for _, pitch, row_pitch in layouts:
        cost = layout_conflicts(row_pitch, pitch, kernel, stride, out_h, out_w, rows, banks)
        if cost == 0:
            return pitch, row_pitch
        if best is None or cost < best[0]:
            best = (cost, pitch, row_pitch)
    assert best is not None
    return best[1], best[2]


def move_cycles(nbytes: int, itemsize: int, block_in: int, banks: int) -> int:
    """Cycles of an on-chip move of `nbytes` (elements of `itemsize` bytes): one `block_in`-element word per
    bank per cycle."""
    return max(1, -(-nbytes // (banks * block_in * itemsize)))
