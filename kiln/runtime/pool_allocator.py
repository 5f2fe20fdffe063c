"""A pool allocator for the "counted" memory strategy: tensors allocated when first written, freed after
their last read, with the live bytes counted.

Freed blocks stay in the pool and a later request takes the smallest free block that holds it, so a
run calls the system allocator only when no freed block fits. One pool serves one run and goes with
it: between runs a counted model holds no intermediate memory. When keeping free blocks would
take the pool past its limit, they are returned to the system first. `peak_live` is the most bytes
tensors held at once (what the order's simulated peak predicts); `peak_held` adds the free blocks.
"""

from __future__ import annotations

import bisect

import numpy as np

from kiln.errors import MemoryLimitError
from kiln.ir.aligned import ALIGN, aligned_empty
from kiln.ir.sizes import format_bytes


class PoolAllocator:
    def __init__(self, limit: int | None = None):
        self.limit = limit
        self._free: list[tuple[int, int, np.ndarray]] = []  # (capacity, serial, block), by capacity
        self._serial = 0
        self._blocks: dict[int, np.ndarray] = {}  # id(array handed out) -> its block
        self.live = self.held = self.peak_live = self.peak_held = 0

    def allocate(self, shape: tuple[int, ...], dtype: np.dtype, what: str) -> np.ndarray:
        """An aligned C-contiguous array of `shape` and `dtype`, from a free block when one is big enough."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        cap = max((nbytes + ALIGN - 1) // ALIGN * ALIGN, ALIGN)
        k = bisect.bisect_left(self._free, (cap, -1))
        if k < len(self._free):
            _, _, block = self._free.pop(k)
        else:
            block = self._new_block(cap, what)
        self.live += nbytes
        self.peak_live = max(self.peak_live, self.live)
        array = block[:nbytes].view(dtype).reshape(shape)
        self._blocks[id(array)] = block
        return array

    def free(self, array: np.ndarray) -> None:
        """Give `array` (from `allocate`) back to the pool."""
        block = self._blocks.pop(id(array))
        self.live -= array.nbytes
        self._serial += 1
        bisect.insort(self._free, (block.nbytes, self._serial, block))

    def _new_block(self, cap: int, what: str) -> np.ndarray:
        if self.limit is not None and self.held + cap > self.limit:
            self.held -= sum(c for c, _, _ in self._free)
            self._free.clear()
            if self.held + cap > self.limit:
                raise MemoryLimitError(
                    f"{what} needs {format_bytes(cap)} more while {format_bytes(self.held)} are live; the memory "
                    f"limit is {format_bytes(self.limit)}")
        self.held += cap
        self.peak_held = max(self.peak_held, self.held)
        return aligned_empty(cap, np.uint8)
