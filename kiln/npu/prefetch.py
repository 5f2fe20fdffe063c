"""Cross-kernel double buffering of weights: a kernel's first weight tile is loaded during the kernel
before it, so the one load that nothing inside a kernel overlaps (its first) overlaps the previous
kernel's compute instead.

The tile goes into a region of the weight buffer beside the previous program's slots and held tensors
(an `isa.Held` of both programs, `prefetch.<kernel>`): the previous program's load unit fills it in parts
along the input channels (`Load.into` / `Load.at`, each about parts.PART_CYCLES of DMA, one after each of its
last steps' loads, so a step's compute hides a part where one long load would hold up the next input
loads), and the kernel's first weight load becomes an on-chip move from that region into its slot. The order across
the two programs is the kernel boundary: kernels of one run execute one after another (the executor
starts a program when the one before has finished every queue), so the region is complete before its
reader starts, and a program that reads it before any program filled it is refused by the simulator, as
for any held tensor. A prefetch is made only between kernels that run back to back on the accelerator
(no CPU step between) and only when both programs' slots still fit beside the region
(`onchip.fits_beside`); the outputs are bit-identical (the same weights reach the same slot).
"""

from __future__ import annotations

import dataclasses

from kiln.npu import onchip, parts
from kiln.npu.config import NpuConfig
from kiln.npu.isa import Held, Load, Push
from kiln.npu.kernel import NpuKernel

NEXT_WEIGHTS = "next.wgt"  # the previous kernel's DRAM name of the next kernel's weights


def prefetch(kernels: list[NpuKernel | None], config: NpuConfig) -> list[NpuKernel | None]:
    """`kernels` with each one's first weight tile loaded during the kernel before it, where it fits."""
    out = list(kernels)
    for i in range(1, len(out)):
        before, kernel = out[i - 1], out[i]
        if before is None or kernel is None:
            continue
        pair = _ahead(before, kernel, config)
        if pair is not None:
            out[i - 1], out[i] = pair
    return out


def _ahead(before: NpuKernel, kernel: NpuKernel, config: NpuConfig) -> tuple[NpuKernel, NpuKernel] | None:
    """(`before`, `kernel`) with `kernel`'s first weight load moved into `before`; None when `kernel` loads
    no weights from DRAM first or a program would not fit beside the region."""
    index, first = next(((k, ins) for k, ins in enumerate(kernel.program.instructions)
                         if isinstance(ins, Load) and ins.buf == "wgt" and not ins.into), (None, None))
    if first is None or first.tensor != "wgt" or NEXT_WEIGHTS in before.constants:
        return None
    region = Held(f"prefetch.{kernel.name}", "wgt", first.size, str(kernel.constants["wgt"].dtype))
    early = dataclasses.replace(before, constants={**before.constants, NEXT_WEIGHTS: kernel.constants["wgt"]},
                                program=dataclasses.replace(before.program, held=(*before.program.held, region),
                                                            instructions=_with_parts(before.program.instructions,
                                                                                     first, region, config)))
    moved = dataclasses.replace(first, tensor=region.tensor, start=(0, 0, 0, 0))
    instructions = list(kernel.program.instructions)
    instructions[index] = moved
    late = dataclasses.replace(kernel, program=dataclasses.replace(
        kernel.program, held=(*kernel.program.held, region), instructions=instructions))
    if not (_fits(early, config) and _fits(late, config)):
        return None
    return early, late


def _with_parts(instructions: list, first: Load, region: Held, config: NpuConfig) -> list:
    """`instructions` with the load of `first` into `region` split along its input channels
    (kiln.npu.parts), one part after each of the last pushes of the load unit: a step's compute hides a
    part where one long load would hold up the next input loads."""
    pushes = [k for k, ins in enumerate(instructions) if isinstance(ins, Push) and ins.unit == "load"]
    split = parts.channel_parts(first.size[2], region.nbytes, len(pushes), config)
    at = {pushes[len(pushes) - len(split) + k]: _part(first, region, c0, cin)
          for k, (c0, cin) in enumerate(split)} if pushes else {}
    out = []
    for k, ins in enumerate(instructions):
        out.append(ins)
        if k in at:
            out.append(at[k])
    return out if at else [*instructions, _part(first, region, 0, first.size[2])]


def _part(first: Load, region: Held, c0: int, cin: int) -> Load:
    """The DMA of input channels c0 .. c0 + cin of `first`'s weights into `region`."""
    start = (first.start[0], first.start[1], first.start[2] + c0, first.start[3])
    size = (first.size[0], first.size[1], cin, first.size[3])
    return dataclasses.replace(first, slot=0, tensor=NEXT_WEIGHTS, start=start, size=size, into=region.tensor,
                               at=(0, 0, c0, 0))


def _fits(kernel: NpuKernel, config: NpuConfig) -> bool:
    held = {0: list(kernel.program.held)}
    return onchip.fits_beside(kernel.program, 0, onchip.Plan(held, []), config)
