"""Lowering: each distinct fused group to one kernel, and the graph executor over them.

`lower_groups` lowers every Primitive function once (structurally equal groups share a kernel);
`build_graph_executor` is the whole pipeline for the kernel-by-kernel executor: optimize and fuse,
lower, compile the kernels into one library, bind them to their groups.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kiln.codegen.backends import build_library
from kiln.codegen.compiler import FLAGS
from kiln.codegen.kernel_binding import reads_unbound_size, size_bindings
from kiln.codegen.lower_fused import Kernel
from kiln.compiler.fuse import fuse
from kiln.compiler.kernel_cache import KernelCache
from kiln.compiler.lower_workers import prefetch, worker_count
from kiln.compiler.specialize import compile_specialized
from kiln.errors import KilnError
from kiln.ir.expr import Function
from kiln.ir.module import IRModule
from kiln.ir.structural import structural_equal, structural_hash
from kiln.runtime.artifact import assemble
from kiln.runtime.executor import GraphExecutor, primitive_functions
from kiln.target import Target
from kiln.transform import PassContext
from kiln.tune.apply import Tuned


def lower_groups(fused: IRModule, tuned: Tuned | None = None, kernels: KernelCache | None = None,
                 target: Target | None = None) -> tuple[list[Kernel], dict[int, Kernel], list[str]]:
    """Lower each distinct Primitive function once: (the kernels to compile, id(function) -> its
    kernel, why each group that could not be lowered runs on the host). `tuned` holds tuning
    records' configs: a group whose workload has one is scheduled with it. `kernels`: where lowered
    groups are cached (default: under the default cache directory). `target`: what to schedule for (default:
    the host). A cold build of many groups shares them with worker processes (kiln.compiler.lower_workers)."""
    kernels = kernels or KernelCache()
    out = _Lowered()
    fns = primitive_functions(fused)
    distinct = _distinct(fns)
    jobs = kernels.uncached(distinct, tuned, target) if worker_count(len(distinct)) else []
    with prefetch(jobs, kernels.root, tuned, target or Target.host(), worker_count(len(jobs))) as workers:
        for n, fn in enumerate(fns):
            if workers is not None:
                workers.claim(n)
            out.add(n, fn, kernels, tuned, target)
    return out.lowered, out.alias, out.host


def _distinct(fns: list[Function]) -> list[tuple[int, Function]]:
    """(index, group) of the first of each set of structurally equal groups: the ones lowering meets."""
    by_hash: dict[int, list[Function]] = {}
    out = []
    for n, fn in enumerate(fns):
        same = by_hash.setdefault(structural_hash(fn), [])
        if not any(structural_equal(f, fn) for f in same):
            same.append(fn)
            out.append((n, fn))
    return out


@dataclass
class _Lowered:
    """lower_groups' answer as it grows (see there)."""

    lowered: list[Kernel] = field(default_factory=list)
    alias: dict[int, Kernel] = field(default_factory=dict)
    host: list[str] = field(default_factory=list)
    by_hash: dict[int, list[tuple[Function, Kernel]]] = field(default_factory=dict)

    def add(self, n: int, fn: Function, kernels: KernelCache, tuned: Tuned | None, target: Target | None) -> None:
        """Lower group n, or alias it to an equal group's kernel, or say why it runs on the host."""
        same = next((k for f, k in self.by_hash.get(structural_hash(fn), []) if structural_equal(f, fn)), None)
        if same is not None:
            self.alias[id(fn)] = same
            return
        try:
            # NOTE: a group the C backend cannot spell must not sink the whole library (the cache renders it)
            k = kernels.lower(fn, f"fused_{n}", tuned, target)
        except KilnError as err:
            self.host.append(str(err))
            return
        except Exception as err:  # a lowering bug: keep the model running (on the host) and say so
            self.host.append(f"fused_{n}: lowering failed ({type(err).__name__}: {err})")
            return
        if size_bindings(k) is None or reads_unbound_size(k):
            self.host.append(f"{k.func.name}: a size inside the group is known from neither the input sizes nor "
                             f"the output shapes")
            return
        self.lowered.append(k)
        self.by_hash.setdefault(structural_hash(fn), []).append((fn, k))
        self.alias[id(fn)] = k


def build_graph_executor(mod: IRModule, opt_level: int = 2, ctx: PassContext | None = None) -> GraphExecutor:
    """Optimize, fuse, lower and compile `mod`; returns a GraphExecutor whose `run` executes it."""
    target = ctx.target if ctx is not None else Target.host()
    fused = fuse(mod, opt_level, ctx)
    lowered, alias, host = lower_groups(fused, target=target)
    lib = build_library([k.func for k in lowered], "model", kind=target.kind, target=target, cc=target.cc,
                        flags=target.compiler_flags(FLAGS)) if lowered else None
    return assemble(fused, alias, host, lambda k: lib.get_function(k.func.name), lib, compile_specialized)
