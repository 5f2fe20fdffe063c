"""Compiling a fused group for the small arguments and input shapes it was called with.

The graph executor (kiln.runtime.specialize) decides when and caches the kernels; this is the
compiler's half, handed to it as `compile_specialized`: the group with its small inputs made
constants and its open parameters typed with the shapes they have now, lowered and compiled.
"""

from __future__ import annotations

import numpy as np

from kiln.codegen.backends import build_library
from kiln.codegen.kernel_binding import reads_unbound_size, size_bindings
from kiln.codegen.lower_fused import lower_primitive
from kiln.errors import KilnError
from kiln.ir.expr import Constant, Function, Var
from kiln.ir.types import TensorType
from kiln.runtime.executor import BoundKernel
from kiln.transform.basic import substitute


def compile_specialized(fn: Function, args: list, idxs: list[int], shaped: list[int], name: str) -> BoundKernel:
    """`fn` with the arguments at `idxs` baked in and those at `shaped` typed with their shapes, as a
    kernel taking the other arguments; KilnError when it cannot be compiled."""
    mapping = {id(fn.params[i]): Constant(np.asarray(args[i])) for i in idxs}
    for i in shaped:  # the same parameter, typed with the shape it has now
        p = fn.params[i]
        mapping[id(p)] = Var(p.name, TensorType(tuple(np.shape(args[i])), p.type.dtype))
    keep = [i for i in range(len(fn.params)) if i not in idxs]
    body = substitute(fn.body, mapping)
    spec = Function(tuple(mapping.get(id(fn.params[i]), fn.params[i]) for i in keep), body, fn.attrs)
    k = lower_primitive(spec, name)
    bindings = size_bindings(k)
    if bindings is None or reads_unbound_size(k):
        raise KilnError("a size inside the group is not known from its inputs")
    lib = build_library([k.func], f"{name}_specialized")
    return BoundKernel(k, lib.get_function(k.func.name), bindings, spec)
