"""The graph executor: a fused model run kernel by kernel, Python between the kernels.

kiln.compiler.lower builds it (each distinct Primitive function lowered to a kernel, all compiled
into one library); kiln.runtime.artifact loads it again. The executor walks `main` like the
interpreter (control flow, tuples and host-only values stay in Python) but runs each fused call
through its kernel, binding symbolic dims from the actual argument shapes: one kernel serves every size.
Sizes that depend on argument values come from the group's type relations (shape_eval); sizes
only the kernel knows (unique, non-zero, NMS) follow runtime_lib's contract. A group without a
kernel is compiled for the small arguments it sees when the compiler gave the executor a way to
(kiln.runtime.specialize), else it runs on the reference implementations; either way it is
reported in `host_groups` / `ran_on_host`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kiln.codegen import runtime_lib
from kiln.codegen.kernel import Kernel
from kiln.codegen.kernel_binding import Binding, empty_outputs, output_buffers, scalar_params
from kiln.codegen.module import CFunction
from kiln.errors import KernelError, MemoryLimitError
from kiln.ir.aligned import aligned
from kiln.ir.expr import Call, Expr, Function, Op, Var
from kiln.ir.input_check import check_input
from kiln.ir.module import IRModule
from kiln.ir.sizes import check_alloc
from kiln.ir.visitor import post_order
from kiln.op.interpreter import Interpreter, Scope
from kiln.runtime.shape_eval import output_shapes
from kiln.runtime.specialize import CompileSpecialized, Specializer
from kiln.runtime.thread_pool import running


@dataclass
class BoundKernel:
    """A lowered kernel with its compiled function and where each of its size parameters comes from."""

    kernel: Kernel
    fn: CFunction
    bindings: list[Binding]  # per scalar param: the input or output dim its value is
    group: Function  # the Primitive function, to find value-dependent output shapes (shape_eval)
    constants: list[np.ndarray] = field(init=False, repr=False)  # the kernel's, on 64-byte boundaries
    outputs: list[Any] = field(init=False, repr=False)  # the kernel's output buffers
    scalar_params: list[Any] = field(init=False, repr=False)  # its size parameters, in calling order

    def __post_init__(self) -> None:
        for c in self.kernel.constants:  # a folded splat (a broadcast view) is copied whole by `aligned`
            if not c.flags.c_contiguous:
                check_alloc(f"a constant of {self.kernel.func.name}", c.shape, c.dtype)
        self.constants = [aligned(c) for c in self.kernel.constants]
        self.outputs = output_buffers(self.kernel)
        self.scalar_params = scalar_params(self.kernel)

    def __call__(self, args: list[np.ndarray]) -> list[np.ndarray]:
        # NOTE: not np.ascontiguousarray, which turns a 0-d array into a 1-d one
        ins = [np.asarray(a, order="C") for a in args] + self.constants
        if None in self.bindings:
            return runtime_lib.call(self.fn, ins)
        shapes = output_shapes(self.group, ins[:self.kernel.num_params]) \
            if any(src == "out" for src, _, _ in self.bindings) else []
        scalars = [int((ins[i].shape if src == "in" else shapes[i])[ax]) for src, i, ax in self.bindings]
        outs = empty_outputs(self.outputs, dict(zip(self.scalar_params, scalars)), self.kernel.func.name)
        self.fn(*ins, *outs, *scalars)
        return outs


@dataclass
class GraphExecutor:
    """A fused model whose groups run through their kernels one call at a time (see the module doc)."""

    mod: IRModule  # optimized and fused
    kernels: dict[int, BoundKernel]  # id(Primitive Function) -> kernel
    host_groups: list[str] = field(default_factory=list)  # why each group without a kernel has none
    library: Any = None
    compile_specialized: CompileSpecialized | None = None  # the compiler's, for groups without a kernel
    specializers: dict[int, Any] = field(default_factory=dict)  # id(group) -> run-time Specializer
    ran_on_host: dict[int, str] = field(default_factory=dict)  # groups that ran on the host, and why
    _outside: dict[int, str] | None = field(default=None, repr=False)

    def ops_outside_groups(self) -> dict[int, str]:
        """Operator calls FuseOps left outside every Primitive function (ops that take a function, such
        as loops and flex attention): the interpreter runs them; id(call) -> why, for `ran_on_host`."""
        if self._outside is None:
            prim = {id(f) for f in primitive_functions(self.mod)}
            self._outside = {}
            for f in self.mod.functions.values():
                for e in post_order(f, skip=prim):
                    if isinstance(e, Call) and isinstance(e.op, Op):
                        node = f" (node {e.name!r})" if getattr(e, "name", None) else ""
                        self._outside[id(e)] = f"{e.op.name}{node} runs outside any fused group (in the interpreter)"
        return self._outside

    def run(self, feeds: dict[str, Any], profile: dict[str, float] | None = None) -> list[Any]:
        main = self.mod.main
        names = [p.name for p in main.params]
        missing = [n for n in names if n not in feeds]
        unknown = sorted(set(feeds) - set(names))
        if unknown or missing:
            from kiln.errors import InputError

            parts = ([f"unknown input name(s) {', '.join(unknown)}"] if unknown else []) + (
                [f"missing input(s) {', '.join(missing)}"] if missing else [])
            raise InputError(f"{'; '.join(parts)}; the model's inputs are {', '.join(names)}")
        dims: dict[str, int] = {}
        scope = Scope()
        for p in main.params:
            scope.values[id(p)] = check_input(p.name, feeds[p.name], p.type, dims)
        with running():
            out = _KernelInterpreter(self, profile).eval(main.body, scope)
        from kiln.ir.types import TupleType

        return list(out) if isinstance(main.body.type, TupleType) else [out]

    def run_fields(self, fields: list[int], values: dict[str, Any]) -> list[Any]:
        """Fields `fields` of main's tuple result from the inputs they read (`values` by name, unchecked): one
        library whose parts run at different times (the CPU steps of an npu-sim model, kiln.npu.cpu_steps)."""
        scope = Scope()
        for p in self.mod.main.params:
            if p.name in values:
                scope.values[id(p)] = values[p.name]
        interp = _KernelInterpreter(self, None)
        with running():
            return [interp.eval(self.mod.main.body.fields[i], scope) for i in fields]


class _KernelInterpreter(Interpreter):
    def __init__(self, cm: GraphExecutor, profile: dict[str, float] | None):
        super().__init__(cm.mod)
        self.cm, self.profile = cm, profile
        self.outside = cm.ops_outside_groups()

    def _compute(self, e: Expr, scope: Scope) -> Any:
        if isinstance(e, Call) and isinstance(e.op, Function) and id(e.op) in self.cm.kernels:
            k = self.cm.kernels[id(e.op)]
            args = [scope.lookup(a)[1] for a in e.args]
            t0 = time.perf_counter()
            try:
                outs = k(args)
            except (KernelError, MemoryLimitError) as err:
                raise type(err)(f"{err} ({describe_group(e.op)})") from None
            if self.profile is not None:
                key = k.kernel.func.name
                self.profile[key] = self.profile.get(key, 0.0) + time.perf_counter() - t0
            return tuple(outs) if len(k.kernel.output_types) > 1 or _returns_tuple(e.op) else outs[0]
        if isinstance(e, Call) and isinstance(e.op, Op) and id(e) in self.outside:
            self.cm.ran_on_host.setdefault(id(e), self.outside[id(e)])
        if isinstance(e, Call) and isinstance(e.op, Function) and e.op.attr("Primitive"):
            args = [scope.lookup(a)[1] for a in e.args]
            spec = self._specialized(e.op, args)
            if spec is not None:
                try:
                    outs = spec.kernel([args[i] for i in spec.keep])
                except KernelError as err:
                    raise KernelError(f"{err} ({describe_group(e.op)})") from None
                return tuple(outs) if len(spec.kernel.kernel.output_types) > 1 or _returns_tuple(e.op) else outs[0]
        return super()._compute(e, scope)

    def _specialized(self, fn: Function, args: list) -> Any:
        """The group's kernel specialized on its small arguments, or None (then it runs on the host)."""
        if self.cm.compile_specialized is None:
            self.cm.ran_on_host[id(fn)] = f"a group of {', '.join(_op_names(fn))}: no kernel ahead of time"
            return None
        sp = self.cm.specializers.get(id(fn))
        if sp is None:
            sp = self.cm.specializers[id(fn)] = Specializer(fn, f"group{len(self.cm.specializers)}",
                                                            self.cm.compile_specialized)
        spec = sp.kernel_for(args)
        if spec is None:
            strings = " on string tensors" if _touches_strings(fn) else ""
            self.cm.ran_on_host[id(fn)] = sp.errors[-1] if sp.errors else (
                f"a group of {', '.join(_op_names(fn))}{strings}: no kernel ahead of time, no small inputs to "
                f"specialize on")
        return spec


def _op_names(fn: Function) -> list[str]:
    return sorted({e.op.name for e in post_order(fn.body) if isinstance(e, Call) and isinstance(e.op, Op)})


def _touches_strings(fn: Function) -> bool:
    from kiln.ir.types import TensorType

    return any(isinstance(e.type, TensorType) and e.type.dtype == "string"
               for e in post_order(fn) if isinstance(e, (Call, Var)))


def _returns_tuple(fn: Function) -> bool:
    from kiln.ir.types import TupleType

    return isinstance(fn.body.type, TupleType)


def primitive_functions(mod: IRModule) -> list[Function]:
    out, seen = [], set()
    for f in mod.functions.values():
        for e in post_order(f):
            if isinstance(e, Function) and e.attr("Primitive") and id(e) not in seen:
                seen.add(id(e))
                out.append(e)
    return out


def describe_group(fn: Function, most: int = 3) -> str:
    """A fused group's operators with their model node names, for error messages."""
    calls = [e for e in post_order(fn.body) if isinstance(e, Call) and isinstance(e.op, Op)]
    named = [f"{e.op.name}" + (f" node {e.name!r}" if getattr(e, "name", None) else "") for e in calls]
    return ", ".join(named[:most]) + (f" and {len(named) - most} more" if len(named) > most else "")
