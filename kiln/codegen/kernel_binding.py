"""How a compiled kernel's size parameters get their values when it is called.

A kernel lowered with symbolic dims takes each dim as a scalar parameter. The caller (the graph
executor in kiln.runtime) binds it from an input's shape, from an output shape the group's type
relations give, or leaves it to the kernel itself (runtime_lib's data-dependent sizes). These are
the facts about a kernel's signature the runtime needs (so it never reads tir objects itself), and
the compiler's check that a kernel reads no other size.
"""

from __future__ import annotations

import numpy as np

from kiln.codegen import runtime_lib
from kiln.codegen.kernel import Kernel
from kiln.codegen.shape_value import shape_value
from kiln.ir.dtype import to_numpy
from kiln.ir.sizes import check_alloc
from kiln.tir import expr as E
from kiln.tir.functor import free_vars, walk
from kiln.tir.stmt import Buffer, For, LetStmt

Binding = tuple[str, int, int] | None  # ("in" | "out", which, axis); None: set by the kernel itself


def scalar_params(k: Kernel) -> list[E.Var]:
    """The kernel's size parameters, in calling order."""
    return [p for p in k.signature if isinstance(p, E.Var)]


def output_buffers(k: Kernel) -> list[Buffer]:
    """The buffers the kernel writes its outputs to (after the inputs and the constants)."""
    return [p for p in k.signature[k.num_params + len(k.constants):] if isinstance(p, Buffer)]


def size_bindings(k: Kernel) -> list[Binding] | None:
    """Where each scalar (symbolic dim) comes from: an input dim; a size the kernel sets itself
    (runtime_lib.data_dependent_vars); else a bare output dim that shape_eval finds from the
    argument values. None when some scalar is none of these."""
    params = k.signature
    n_in = k.num_params + len(k.constants)
    set_by_kernel = set(runtime_lib.data_dependent_vars(k.func))
    outs = output_buffers(k)
    out: list[Binding] = []
    for v in scalar_params(k):
        found = next((("in", i, ax) for i, b in enumerate(params[:n_in]) for ax, d in enumerate(b.shape)
                      if d is v), None)
        if found is None and not set_by_kernel:
            found = next((("out", i, ax) for i, b in enumerate(outs) for ax, d in enumerate(b.shape) if d is v), None)
        if found is None and v not in set_by_kernel:
            return None
        out.append(found)
    return out


def reads_unbound_size(k: Kernel) -> bool:
    """Whether the kernel reads a size that is none of its parameters (an intermediate's
    value-dependent dim, which no output shape reveals)."""
    body = k.func.body
    bound = {p for p in k.func.params if isinstance(p, E.Var)}
    bound |= {x.loop_var if isinstance(x, For) else x.var for x in walk(body) if isinstance(x, (For, LetStmt, E.Let))}
    return bool(free_vars(body) - bound)


def empty_outputs(buffers: list[Buffer], bound: dict[E.Var, int], what: str = "a kernel") -> list[np.ndarray]:
    """Uninitialized arrays for the output buffers, their dims evaluated with the bound sizes; each is
    checked against the memory bound first (kiln.ir.sizes)."""
    shapes = [tuple(shape_value(d, bound) for d in b.shape) for b in buffers]
    for i, (shape, b) in enumerate(zip(shapes, buffers)):
        check_alloc(f"output {i} of {what}", shape, b.dtype)
    return [np.empty(shape, to_numpy(b.dtype)) for shape, b in zip(shapes, buffers)]
