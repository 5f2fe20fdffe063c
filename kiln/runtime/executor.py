"""Compiled execution: every fused group runs as a generated C kernel.

`build` optimizes the module (FuseOps always runs), lowers each distinct Primitive function to a
kernel and compiles them all into one library. The executor walks `main` like the interpreter
(control flow, tuples and host-only values stay in Python) but runs each fused call through its
kernel, binding symbolic dims from the actual argument shapes: one kernel serves every size.
Sizes that depend on argument values come from the group's type relations (shape_eval); sizes
only the kernel knows (unique, non-zero, NMS) follow runtime_lib's contract. A group that cannot
be compiled (an operator without a compute) runs on the reference implementations instead and is
reported in `host_groups`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kiln.codegen import runtime_lib
from kiln.codegen.compiler import FLAGS
from kiln.codegen.lower_fused import Kernel
from kiln.codegen.module import CFunction, _eval, build as build_c
from kiln.errors import KernelError, KilnError
from kiln.ir.aligned import aligned
from kiln.ir.dtype import to_numpy
from kiln.ir.expr import Call, Expr, Function, Op, Var
from kiln.ir.module import IRModule
from kiln.ir.structural import structural_hash, structural_equal
from kiln.ir.visitor import post_order
from kiln.runtime.interpreter import Interpreter, Scope, check_input
from kiln.runtime.kernel_cache import KernelCache
from kiln.runtime.shape_eval import output_shapes
from kiln.tir import expr as E
from kiln.tir.functor import free_vars, walk
from kiln.tir.stmt import Buffer, For, LetStmt
from kiln.target import Target
from kiln.transform import PassContext
from kiln.transform.pipeline import optimize
from kiln.tune.apply import Tuned


Binding = tuple[str, int, int] | None  # ("in" | "out", which, axis); None: set by the kernel itself


@dataclass
class CompiledKernel:
    kernel: Kernel
    fn: CFunction
    bindings: list[Binding]  # per scalar param: the input or output dim its value is
    outputs: list[Buffer]
    group: Function  # the Primitive function, to find value-dependent output shapes (shape_eval)
    constants: list[np.ndarray] = field(init=False, repr=False)  # the kernel's, on 64-byte boundaries

    def __post_init__(self) -> None:
        self.constants = [aligned(c) for c in self.kernel.constants]

    def __call__(self, args: list[np.ndarray]) -> list[np.ndarray]:
        # NOTE: not np.ascontiguousarray, which turns a 0-d array into a 1-d one
        ins = [np.asarray(a, order="C") for a in args] + self.constants
        if None in self.bindings:
            return runtime_lib.call(self.fn, ins)
        shapes = output_shapes(self.group, ins[:self.kernel.num_params]) \
            if any(src == "out" for src, _, _ in self.bindings) else []
        scalars = [int((ins[i].shape if src == "in" else shapes[i])[ax]) for src, i, ax in self.bindings]
        bound = {v: n for v, n in zip(self.scalar_params, scalars)}
        outs = [np.empty(tuple(_eval(d, bound) for d in b.shape), to_numpy(b.dtype)) for b in self.outputs]
        self.fn(*ins, *outs, *scalars)
        return outs

    @property
    def scalar_params(self) -> list[E.Var]:
        return [p for p in self.kernel.signature if isinstance(p, E.Var)]


def _bindings(k: Kernel) -> list[Binding] | None:
    """Where each scalar (symbolic dim) comes from: an input dim; a size the kernel sets itself
    (runtime_lib.data_dependent_vars); else a bare output dim that shape_eval finds from the
    argument values. None when some scalar is none of these."""
    params = k.signature
    n_in = k.num_params + len(k.constants)
    set_by_kernel = set(runtime_lib.data_dependent_vars(k.func))
    outs = [b for b in params[n_in:] if isinstance(b, Buffer)]
    out: list[Binding] = []
    for v in (p for p in params if isinstance(p, E.Var)):
        found = next((("in", i, ax) for i, b in enumerate(params[:n_in]) for ax, d in enumerate(b.shape)
                      if d is v), None)
        if found is None and not set_by_kernel:
            found = next((("out", i, ax) for i, b in enumerate(outs) for ax, d in enumerate(b.shape) if d is v), None)
        if found is None and v not in set_by_kernel:
            return None
        out.append(found)
    return out


def _unbound(k: Kernel) -> bool:
    """Whether the kernel reads a size that is none of its parameters (an intermediate's
    value-dependent dim, which no output shape reveals)."""
    body = k.func.body
    bound = {p for p in k.func.params if isinstance(p, E.Var)}
    bound |= {x.loop_var if isinstance(x, For) else x.var for x in walk(body) if isinstance(x, (For, LetStmt, E.Let))}
    return bool(free_vars(body) - bound)


@dataclass
class CompiledModule:
    mod: IRModule  # optimized and fused
    kernels: dict[int, CompiledKernel]  # id(Primitive Function) -> kernel
    host_groups: list[str] = field(default_factory=list)  # why each group without a kernel has none
    library: Any = None
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
        out = _KernelInterpreter(self, profile).eval(main.body, scope)
        from kiln.ir.types import TupleType

        return list(out) if isinstance(main.body.type, TupleType) else [out]


class _KernelInterpreter(Interpreter):
    def __init__(self, cm: CompiledModule, profile: dict[str, float] | None):
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
            except KernelError as err:
                raise KernelError(f"{err} ({describe_group(e.op)})") from None
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
        from kiln.runtime.specialize import Specializer

        sp = self.cm.specializers.get(id(fn))
        if sp is None:
            sp = self.cm.specializers[id(fn)] = Specializer(fn, f"group{len(self.cm.specializers)}")
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


def fuse(mod: IRModule, opt_level: int = 2, ctx: PassContext | None = None) -> IRModule:
    """The optimized module with every operator in a Primitive function (FuseOps always runs)."""
    ctx = ctx or PassContext(opt_level=opt_level)
    ctx = PassContext(opt_level, tuple(ctx.required) + ("fuse-ops",), ctx.disabled, ctx.instruments, ctx.config,
                      target=ctx.target)
    return optimize(mod, opt_level, ctx)


def describe_group(fn: Function, most: int = 3) -> str:
    """A fused group's operators with their model node names, for error messages."""
    calls = [e for e in post_order(fn.body) if isinstance(e, Call) and isinstance(e.op, Op)]
    named = [f"{e.op.name}" + (f" node {e.name!r}" if getattr(e, "name", None) else "") for e in calls]
    return ", ".join(named[:most]) + (f" and {len(named) - most} more" if len(named) > most else "")


def lower_groups(fused: IRModule, tuned: Tuned | None = None, kernels: KernelCache | None = None,
                 target: Target | None = None) -> tuple[list[Kernel], dict[int, Kernel], list[str]]:
    """Lower each distinct Primitive function once: (the kernels to compile, id(function) -> its
    kernel, why each group that could not be lowered runs on the host). `tuned` holds tuning
    records' configs: a group whose workload has one is scheduled with it. `kernels`: where lowered
    groups are cached (default: under the default cache directory). `target`: what to schedule for (default:
    the host)."""
    lowered: list[Kernel] = []
    host: list[str] = []
    by_hash: dict[int, list[tuple[Function, Kernel]]] = {}
    alias: dict[int, Kernel] = {}
    kernels = kernels or KernelCache()
    for n, fn in enumerate(primitive_functions(fused)):
        same = next((k for f, k in by_hash.get(structural_hash(fn), []) if structural_equal(f, fn)), None)
        if same is not None:
            alias[id(fn)] = same
            continue
        try:
            # NOTE: a group the C backend cannot spell must not sink the whole library (the cache renders it)
            k = kernels.lower(fn, f"fused_{n}", tuned, target)
        except KilnError as err:
            host.append(str(err))
            continue
        except Exception as err:  # a lowering bug: keep the model running (on the host) and say so
            host.append(f"fused_{n}: lowering failed ({type(err).__name__}: {err})")
            continue
        if _bindings(k) is None or _unbound(k):
            host.append(f"{k.func.name}: a size inside the group is known from neither the input sizes nor the "
                        f"output shapes")
            continue
        lowered.append(k)
        by_hash.setdefault(structural_hash(fn), []).append((fn, k))
        alias[id(fn)] = k
    return lowered, alias, host


def build(mod: IRModule, opt_level: int = 2, ctx: PassContext | None = None) -> CompiledModule:
    """Optimize, fuse, lower and compile `mod`; returns a CompiledModule whose `run` executes it."""
    target = ctx.target if ctx is not None else Target.host()
    fused = fuse(mod, opt_level, ctx)
    lowered, alias, host = lower_groups(fused, target=target)
    lib = build_c([k.func for k in lowered], "model", flags=target.compiler_flags(FLAGS)) if lowered else None
    compiled = {}
    by_kernel = {id(k): None for k in lowered}
    for fn in primitive_functions(fused):
        k = alias.get(id(fn))
        if k is None:
            continue
        if by_kernel.get(id(k)) is None:
            cf = lib.get_function(k.func.name)
            n_in = k.num_params + len(k.constants)
            outs = [p for p in k.signature[n_in:] if isinstance(p, Buffer)]
            by_kernel[id(k)] = CompiledKernel(k, cf, _bindings(k), outs, fn)
        compiled[id(fn)] = by_kernel[id(k)]
    return CompiledModule(fused, compiled, host, lib)
