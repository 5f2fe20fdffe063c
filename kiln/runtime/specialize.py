"""Run-time specialization of fused groups on small inputs.

A kernel needs some inputs as compile-time constants (reduction axes, top-k's k, pads, resize
scales, slice starts). When a model feeds them as graph inputs, the group cannot be compiled ahead
of time; instead it is compiled the first time it runs, for the values it sees (those inputs become
constants of the group), and the kernel is cached by those values, so later calls with the same
values run at once. Likewise a group whose parameter types leave a dim open (a Scan body, a shape
computed from data) and that could not be lowered with symbolic sizes is compiled for the input
shapes it sees, cached by those shapes (at most MAX_SHAPES of them). Groups that still cannot be
lowered run on the host.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from kiln.codegen.lower_fused import lower_primitive
from kiln.codegen.backends import build_library
from kiln.errors import KilnError
from kiln.ir.expr import Constant, Function, Var
from kiln.ir.types import TensorType
from kiln.tir.stmt import Buffer
from kiln.transform.basic import substitute

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


@dataclass
class Specialized:
    kernel: object  # executor.CompiledKernel
    keep: list[int]  # argument positions the specialized kernel still takes


@dataclass
class Specializer:
    fn: Function
    name: str
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
        from kiln.runtime.executor import CompiledKernel, _bindings, _unbound

        mapping = {id(self.fn.params[i]): Constant(np.asarray(args[i])) for i in idxs}
        for i in shaped:  # the same parameter, typed with the shape it has now
            p = self.fn.params[i]
            mapping[id(p)] = Var(p.name, TensorType(tuple(np.shape(args[i])), p.type.dtype))
        keep = [i for i in range(len(self.fn.params)) if i not in idxs]
        try:
            body = substitute(self.fn.body, mapping)
            spec = Function(tuple(mapping.get(id(self.fn.params[i]), self.fn.params[i]) for i in keep), body,
                            self.fn.attrs)
            k = lower_primitive(spec, f"{self.name}_s{len(self.cache)}")
            bindings = _bindings(k)
            if bindings is None or _unbound(k):
                raise KilnError("a size inside the group is not known from its inputs")
            lib = build_library([k.func], f"{self.name}_specialized")
        except KilnError as err:
            self.errors.append(str(err))
            return None
        except Exception as err:  # a lowering bug: the group still runs (on the host), and says why
            self.errors.append(f"{self.name}: lowering failed ({type(err).__name__}: {err})")
            return None
        n_in = k.num_params + len(k.constants)
        outs = [p for p in k.signature[n_in:] if isinstance(p, Buffer)]
        return Specialized(CompiledKernel(k, lib.get_function(k.func.name), bindings, outs, spec), keep)
