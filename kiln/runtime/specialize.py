"""Run-time specialization of fused groups on small inputs.

A kernel needs some inputs as compile-time constants (reduction axes, top-k's k, pads, resize
scales, slice starts). When a model feeds them as graph inputs, the group cannot be compiled ahead
of time; instead it is compiled the first time it runs, for the values it sees (those inputs become
constants of the group), and the kernel is cached by those values, so later calls with the same
values run at once. Likewise a group whose parameter types leave a dim open (a Scan body, a shape
computed from data) and that could not be lowered with symbolic sizes is compiled for the input
shapes it sees, cached by those shapes (at most MAX_SHAPES of them). Groups that still cannot be
lowered run on the host.

This module decides when to compile and caches what was compiled; the compiling itself is the
compiler's (kiln.compiler.specialize), handed to the graph executor when the compiler builds it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kiln.errors import KilnError
from kiln.ir.expr import Function
from kiln.ir.types import TensorType

SMALL_INPUT_ELEMENTS = 64  # inputs up to this size may be baked into a specialized kernel
MAX_SHAPES = 16  # distinct shape keys a group compiles for; past that it runs on the host


def small_params(fn: Function) -> list[int]:
    """Positions of the group's parameters small enough to specialize on."""
    out = []
    for i, p in enumerate(fn.params):
        t = p.type
        if (isinstance(t, TensorType) and t.is_static and math.prod(t.shape) <= SMALL_INPUT_ELEMENTS
                and t.dtype not in ("string",)):
            out.append(i)
    return out


def open_params(fn: Function) -> list[int]:
    """Positions of the group's tensor parameters whose rank or some dim the types leave open."""
    return [i for i, p in enumerate(fn.params) if isinstance(p.type, TensorType) and not p.type.is_static]


# (group, its arguments, the small parameters to bake in, the open ones to fix, kernel name) -> a
# kernel (executor.BoundKernel) taking the other arguments; raises KilnError when it cannot
CompileSpecialized = Callable[[Function, list, list[int], list[int], str], Any]


@dataclass
class Specialized:
    kernel: Any  # executor.BoundKernel
    keep: list[int]  # argument positions the specialized kernel still takes


@dataclass
class Specializer:
    fn: Function
    name: str
    compile: CompileSpecialized
    cache: dict[tuple, Specialized | None] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def kernel_for(self, args: list) -> Specialized | None:
        idxs = small_params(self.fn)
        shaped = open_params(self.fn)
        if not idxs and not shaped:
            return None
        key = tuple((np.asarray(args[i]).dtype.str, np.asarray(args[i]).shape, np.asarray(args[i]).tobytes())
                    for i in idxs) + tuple(np.shape(args[i]) for i in shaped)
        if key not in self.cache:
            if shaped and len(self.cache) >= MAX_SHAPES:
                full = f"{self.name}: compiled for {MAX_SHAPES} input shapes already"
                if full not in self.errors[-1:]:
                    self.errors.append(full)
                return None
            self.cache[key] = self._compile(args, idxs, shaped)
        return self.cache[key]

    def _compile(self, args: list, idxs: list[int], shaped: list[int]) -> Specialized | None:
        keep = [i for i in range(len(self.fn.params)) if i not in idxs]
        try:
            kernel = self.compile(self.fn, args, idxs, shaped, f"{self.name}_s{len(self.cache)}")
        except KilnError as err:
            self.errors.append(str(err))
            return None
        except Exception as err:  # a lowering bug: the group still runs (on the host), and says why
            self.errors.append(f"{self.name}: lowering failed ({type(err).__name__}: {err})")
            return None
        return Specialized(kernel, keep)
