"""The arenas of one AOT model's runs in flight: each run holds one for as long as it is in flight
(a preempted run until it is resumed to the end or closed), so runs of one model on different
threads never share intermediate tensors and no lock is held while kernels run.

A freed arena is reused by the next run without clearing it: a run from step 0 writes every
intermediate tensor before any kernel reads it (the memory plan places only kernel outputs in the
arena), so what a finished, failed or cancelled run left there is never read. Up to `KEEP_IDLE`
free arenas are kept; the rest go back to the allocator.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass

import numpy as np

from kiln.errors import MemoryLimitError
from kiln.ir.aligned import aligned_empty
from kiln.ir.sizes import check_bytes, current_limit, format_bytes

KEEP_IDLE = 4


@dataclass
class RunSlot:
    """What one run in flight owns: its arena and the pointer arrays the entry reads its inputs and
    outputs from (filled by the run, so two runs never write the same array)."""

    arena: np.ndarray
    arena_ptr: ctypes.c_void_p
    in_ptrs: ctypes.Array
    out_ptrs: ctypes.Array

    def point(self, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
        """Point the entry's input and output arrays at this run's tensors."""
        for i, v in enumerate(inputs):
            self.in_ptrs[i] = v.ctypes.data
        for i, o in enumerate(outputs):
            self.out_ptrs[i] = o.ctypes.data


class ArenaPool:
    """Hands out `RunSlot`s of `arena_bytes` each; the first is made (and size-checked) at once."""

    def __init__(self, arena_bytes: int, num_inputs: int, num_outputs: int):
        self.arena_bytes = arena_bytes
        self._num_inputs, self._num_outputs = num_inputs, num_outputs
        self._lock = threading.Lock()
        check_bytes("the arena of intermediate tensors", arena_bytes)
        self._idle = [self._new_slot()]
        self._busy = 0

    def acquire(self) -> RunSlot:
        """An idle slot, or a new one when every slot is held by a run in flight. A new arena is
        checked first: against a memory limit together with the arenas runs in flight hold (they
        all count), against the memory available on its own (held arenas are no longer available)."""
        with self._lock:
            if self._idle:
                self._busy += 1
                return self._idle.pop()
            held = self._busy
            self._check_new(held)
            self._busy += 1
        try:
            return self._new_slot()
        except BaseException:
            with self._lock:
                self._busy -= 1
            raise

    def release(self, slot: RunSlot) -> None:
        """Give back a slot whose run finished, failed or was closed."""
        with self._lock:
            self._busy -= 1
            if len(self._idle) < KEEP_IDLE:
                self._idle.append(slot)

    @property
    def in_flight(self) -> int:
        """Slots held by runs now."""
        return self._busy

    def _check_new(self, held: int) -> None:
        limit, kind = current_limit()
        need = self.arena_bytes * (held + 1) if kind == "the memory limit" else self.arena_bytes
        if need > limit:
            raise MemoryLimitError(
                f"the arena of intermediate tensors for one more run in flight needs "
                f"{format_bytes(self.arena_bytes)}; with the {held} arena(s) of runs already in flight "
                f"that is {format_bytes(need)}, and {format_bytes(limit)} "
                f"{'is' if kind == 'the memory limit' else 'are'} {kind}")

    def _new_slot(self) -> RunSlot:
        arena = aligned_empty(self.arena_bytes, np.uint8)
        return RunSlot(arena, ctypes.c_void_p(arena.ctypes.data),
                       (ctypes.c_void_p * max(self._num_inputs, 1))(),
                       (ctypes.c_void_p * max(self._num_outputs, 1))())
