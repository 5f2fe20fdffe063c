"""Kiln threading: the outermost PARALLEL loop becomes a launch into Kiln's thread pool (kiln_pool.h).

Where OpenMP threading writes `#pragma omp parallel for`, the loop body is lifted into a static task
function `int32_t task(void* closure, int64_t begin, int64_t end, kiln_task_ctl_t* ctl)` that runs
iterations [begin, end), with a closure struct holding the loop's free variables (buffer pointers, sizes, outer
loop and let variables: whatever the body's printing looked up outside it). The kernel fills the
closure and calls `kiln_parallel_launch`; a non-zero result (an error, or KILN_PREEMPTED) stops the
kernel at once: it jumps out through the frees of its heap temporaries (c_stmt's failure_exit) and
returns the code. Inner loops keep `omp simd` (gcc's -fopenmp-simd, no OpenMP runtime).

Chunking: the grain is chosen so that one chunk is about CHUNK_OPS tir operations (few enough
chunks that taking one, an atomic add, costs well under 1%; the pool balances them over the cores);
a launch whose whole work is below STATIC_MAX_OPS is split statically, one range per core.

Checkpoints: a chunk can be one long iteration (a dense layer's column block: about 260 us in the
BERT encoder, timed on one core of a busy machine), and a cancel would wait for all of it. So inside
a task every loop whose iteration is at least CHECK_OPS operations and which no simd pragma covers
begins each iteration by reading the run's cancel flag (through the task's `kiln_ctl`, a relaxed
load: a nanosecond against microseconds of work) and, when set, records the launch iteration it was
in (`stopped_at`: the ones before it in the chunk finished) and leaves the task with KILN_PREEMPTED
through its frees; a resumed launch starts at that iteration.

A launch is RESUMABLE when its body writes only function parameters that nothing else in the kernel
writes, and scratch it allocates itself (see kiln_pool.c on why the resumed launch may then skip its
finished iterations).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from pathlib import Path

from kiln.codegen import c_stmt, runtime_lib
from kiln.codegen.c_stmt import EXIT_LABEL, FunctionPrinter
from kiln.codegen.c_types import BODY_SYMBOL, ERROR_FLAG
from kiln.codegen.names import NameScope
from kiln.codegen.offsets import is_const
from kiln.tir import expr as E
from kiln.tir import stmt as S
from kiln.tir.expr import elem_of
from kiln.tir.functor import walk
from kiln.tir.transform.simplify import loop_range

CHUNK_OPS = 50_000  # tir operations per chunk: ~20-30 us at 2 operations per ns
STATIC_MAX_OPS = 2 * CHUNK_OPS  # below this a launch is split statically (one range per core)
CHECK_OPS = 20_000  # tir operations of a loop iteration that begins with a cancel checkpoint
UNKNOWN_EXTENT = 16  # the trip count assumed for a loop of symbolic extent
VECTOR_LANES = 8  # operations of a simd/vectorized loop run this many iterations at once
RESUMABLE = 1  # KILN_LAUNCH_RESUMABLE
POOL_HEADER = Path(__file__).with_name("kiln_pool.h")


@functools.cache
def pool_header() -> str:
    """kiln_pool.h, declared once in every module that launches (as a module declaration)."""
    return POOL_HEADER.read_text().rstrip("\n")


class TaskPrinter(FunctionPrinter):
    """Prints a lifted loop body in its own function, recording the outer variables and buffers it
    uses: they become the closure. Shares the outer printer's simplifier (the enclosing loops'
    bounds), module declarations and rules; its own names live in a child scope."""

    def __init__(self, outer: FunctionPrinter):
        super().__init__(outer.rules, NameScope(outer.scope), outer.decls)
        self.sim, self.func = outer.sim, outer.func
        self.in_parallel = True  # nested PARALLEL loops run serially inside the task
        self.captured: dict[int, tuple[E.Var | S.Buffer, str]] = {}
        self.iteration = "kiln_begin"  # C for the launch iteration running (set once the loop is declared)

    def var(self, v: E.Var) -> str:
        return self._capture(v, super().var(v))

    def buffer(self, buf) -> str:
        return self._capture(buf, super().buffer(buf))

    def loop_entry(self, s: S.For, pragma: str | None) -> None:
        if pragma is None and not self.in_simd and _work(s.body) >= CHECK_OPS:
            self.uses_error_flag = True
            self.emit(f"  if (__atomic_load_n(kiln_ctl->cancel, __ATOMIC_RELAXED)) {{ kiln_ctl->stopped_at = "
                      f"{self.iteration}; {ERROR_FLAG} = KILN_PREEMPTED; goto {self.failure_exit()}; }}")

    def _capture(self, obj, name: str) -> str:
        if not self.scope.owns(obj):
            self.captured.setdefault(id(obj), (obj, name))
        return name


def launching(base: Callable[[FunctionPrinter, S.For], None]) -> Callable[[FunctionPrinter, S.For], None]:
    """The For rule that turns a PARALLEL loop outside any parallel region into launches, and prints
    every other loop by `base` (the rules' own For rule)."""

    def rule(p: FunctionPrinter, s: S.For) -> None:
        if s.kind is not S.ForKind.PARALLEL or p.in_parallel or p.in_simd or _calls_runtime(s):
            base(p, s)
        else:
            _launches(p, s)

    return rule


def _launches(p: FunctionPrinter, s: S.For) -> None:
    pragma = c_stmt._loop_pragma(p, s)
    halves = c_stmt._clamp_halves(s, pragma)
    simd = pragma is not None and "simd" in pragma
    for loop in halves or (s,):
        # NOTE: the second half re-reads what the first wrote: neither may skip chunks on a resume
        _launch(p, loop, simd, resumable=halves is None and _resumable(p, loop))


def _launch(p: FunctionPrinter, s: S.For, simd: bool, resumable: bool) -> None:
    k = len(p.preamble)
    task_name, closure_type = f"{BODY_SYMBOL}_task{k}", f"{BODY_SYMBOL}_closure{k}"
    t = TaskPrinter(p)
    i, ty = t.declare(s.loop_var), t.ctype(s.loop_var.dtype)
    start = "" if is_const(s.min, 0) else f"{t.expr(s.min)} + "
    t.iteration = i if not start else f"({i} - ({t.expr(s.min)}))"
    if simd:
        t.emit("#pragma omp simd")
    t.emit(f"for ({ty} {i} = {start}kiln_begin; {i} < {start}kiln_end; ++{i}) {{")
    with p.sim.scope(s.loop_var, loop_range(p.sim, s.min, s.extent)):
        t.loop_entry(s, "simd" if simd else None)  # a chunk may hold many iterations (the pool caps chunks)
        t.block(s.body)
    t.emit("}")
    fields = [(_field_type(p, obj), name) for obj, name in t.captured.values()]
    p.preamble.append(_task_source(task_name, closure_type, fields, t))
    p.uses_error_flag = True
    p.decls.extern("kiln_pool.h", pool_header())
    init = ", ".join(name for _, name in fields) or "0"
    grain = _grain(s)
    p.emit("{")
    p.emit(f"  {closure_type} kiln_c = {{{init}}};")
    p.emit(f"  int32_t kiln_rc = kiln_parallel_launch({task_name}, &kiln_c, (int64_t)({p.expr(s.extent)}), "
           f"{grain}LL, {RESUMABLE if resumable else 0});")
    p.emit(f"  if (kiln_rc != KILN_OK) {{ {ERROR_FLAG} = kiln_rc; goto {p.failure_exit()}; }}")
    p.emit("}")


def _task_source(name: str, closure_type: str, fields: list[tuple[str, str]], t: TaskPrinter) -> str:
    members = " ".join(f"{ct} {n};" for ct, n in fields) or "char unused;"
    unpack = [f"  {ct} {n} = kiln_c->{n};" for ct, n in fields]
    flag = [f"  int32_t {ERROR_FLAG} = KILN_OK;"] if t.uses_error_flag else []
    ret = ERROR_FLAG if t.uses_error_flag else "KILN_OK"
    exit_label = [f"{EXIT_LABEL}:;"] if EXIT_LABEL in t.jumps else []
    lines = [f"typedef struct {{ {members} }} {closure_type};",
             f"static int32_t {name}(void* kiln_closure, int64_t kiln_begin, int64_t kiln_end, "
             "kiln_task_ctl_t* kiln_ctl) {",
             f"  const {closure_type}* kiln_c = (const {closure_type}*)kiln_closure;", "  (void)kiln_ctl;"]
    lines += unpack or ["  (void)kiln_c;"]
    return "\n".join([*lines, *flag, *t.lines, *exit_label, f"  return {ret};", "}"])


def _field_type(p: FunctionPrinter, obj: E.Var | S.Buffer) -> str:
    """A captured variable's value type; a captured buffer's pointer, `restrict` where the kernel's
    own is (a parameter of a noalias function) or where nothing else can reach it (a local)."""
    if isinstance(obj, E.Var):
        return p.ctype(obj.dtype)
    ct = p.rules.storage_ctype[elem_of(obj.dtype)]
    is_param = p.func is not None and any(obj is q for q in p.func.params)
    noalias = p.func is not None and bool(p.func.attr("noalias", False))
    return f"{ct}* restrict" if noalias or not is_param else f"{ct}*"


def _calls_runtime(s: S.Stmt) -> bool:
    """Runtime-library calls set the kernel's data-dependent sizes: such a loop stays in the kernel."""
    return any(isinstance(x, S.Evaluate) and isinstance(x.value, E.Call) and x.value.name in runtime_lib.RUNTIME_FUNCS
               for x in walk(s))


def _resumable(p: FunctionPrinter, s: S.For) -> bool:
    """Whether the loop writes only parameters that no other statement of the kernel writes, and
    buffers it allocates itself."""
    params = {id(b) for b in p.func.params if isinstance(b, S.Buffer)} if p.func is not None else set()
    local = {id(x.buffer) for x in walk(s) if isinstance(x, S.Allocate)}
    inside = [x.buffer for x in walk(s) if isinstance(x, S.BufferStore)]
    if any(id(b) not in params and id(b) not in local for b in inside):
        return False
    written = {id(b) for b in inside if id(b) in params}
    everywhere = sum(1 for x in walk(p.func.body) if isinstance(x, S.BufferStore) and id(x.buffer) in written)
    return everywhere == sum(1 for b in inside if id(b) in written)


def _grain(s: S.For) -> int:
    """Iterations per chunk (0: static): chunks of about CHUNK_OPS operations."""
    per_iteration = max(_work(s.body), 1.0)
    n = s.extent.value if isinstance(s.extent, E.IntImm) else None
    if n is not None and n * per_iteration <= STATIC_MAX_OPS:
        return 0
    return max(1, math.ceil(CHUNK_OPS / per_iteration))


def _work(s: S.Stmt) -> float:
    """Estimated tir operations of one execution of `s` (expression nodes times trip counts)."""
    rule = _WORK.get(type(s))
    return rule(s) if rule is not None else float(_nodes(s))


def _nodes(node) -> int:
    return sum(1 for x in walk(node) if isinstance(x, E.PrimExpr))


def _loop_work(s: S.For) -> float:
    trips = s.extent.value if isinstance(s.extent, E.IntImm) else UNKNOWN_EXTENT
    vector = s.kind is S.ForKind.VECTORIZED or dict(s.annotations).get("simd", False)
    return trips * _work(s.body) / (VECTOR_LANES if vector else 1)


_WORK: dict[type, Callable[[S.Stmt], float]] = {
    S.For: _loop_work,
    S.SeqStmt: lambda s: sum(_work(x) for x in s.stmts),
    S.IfThenElse: lambda s: _nodes(s.cond) + max(_work(s.then_case), _work(s.else_case) if s.else_case else 0.0),
    S.LetStmt: lambda s: _nodes(s.value) + _work(s.body),
    S.Allocate: lambda s: _work(s.body),
}
