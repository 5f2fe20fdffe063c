"""How each tir statement is spelled in C: loops with their OpenMP/GCC pragmas, stores, allocations.

Only the outermost PARALLEL loop becomes `omp parallel for` (nested ones run serially in their
thread); nothing OpenMP is emitted inside an `omp simd` loop, which OpenMP forbids.
"""

from __future__ import annotations

from collections.abc import Callable

from kiln.codegen import runtime_lib
from kiln.codegen.c_expr import ExprPrinter
from kiln.codegen.c_types import ERROR_FLAG, SIZEOF, STORE_CONVERT, CodegenError
from kiln.codegen.offsets import flat_offset, is_const, mul
from kiln.tir import expr as E
from kiln.tir import stmt as S
from kiln.tir.bound import is_int
from kiln.tir.expr import elem_of, lanes_of
from kiln.tir.functor import substitute, walk
from kiln.tir.transform.simplify import loop_range

EXIT_LABEL = "kiln_exit"  # the function's end, where a failure with no heap temporary to free jumps
STACK_ALLOC_MAX_BYTES = 16384  # larger (or symbolic) allocations go to the heap
UNROLL_UNKNOWN_EXTENT = 4  # `#pragma GCC unroll` factor when the extent is symbolic


class FunctionPrinter(ExprPrinter):
    """Spells one function body into `lines`."""

    def __init__(self, rules, scope, decls, bounds=None):
        super().__init__(rules, scope, decls, bounds)
        self.lines: list[str] = []
        self.depth = 1
        self.in_parallel = self.in_simd = self.uses_error_flag = False
        self.func = None  # the PrimFunc being printed (c_source sets it)
        self.heap: list[str] = []  # the enclosing heap temporaries, innermost last
        self.jumps: set[str] = set()  # labels a failed launch jumps to (Kiln threading: kiln.codegen.c_launch)
        self.preamble: list[str] = []  # file-scope code the function needs before it (lifted tasks)

    def emit(self, line: str) -> None:
        self.lines.append("  " * self.depth + line)

    def stmt(self, s: S.Stmt) -> None:
        rule = self.rules.stmt.get(type(s))
        if rule is None:
            raise CodegenError(f"the C backend cannot spell tir statement {type(s).__name__}")
        rule(self, s)

    def block(self, s: S.Stmt) -> None:
        self.depth += 1
        self.stmt(s)
        self.depth -= 1

    def loop_entry(self, s: S.For, pragma: str | None) -> None:
        """Code every iteration of loop `s` begins with, printed before its body: none here (Kiln
        threading's task printer puts cancel checkpoints there, kiln.codegen.c_launch)."""

    def failure_exit(self) -> str:
        """Where code that must stop the function jumps: the free of the innermost enclosing heap
        temporary (which then jumps on outwards), else the function's end."""
        label = f"kiln_free_{self.heap[-1]}" if self.heap else EXIT_LABEL
        self.jumps.add(label)
        return label

    def free(self, name: str) -> None:
        """Free heap temporary `name` at the end of its block; a failure inside jumps here first."""
        label = f"kiln_free_{name}"
        if label not in self.jumps:
            self.emit(f"  free({name});")
            return
        self.emit(f"  {label}: free({name});")
        self.emit(f"  if ({ERROR_FLAG} != KILN_OK) goto {self.failure_exit()};")


def _store(p: FunctionPrinter, s: S.BufferStore) -> None:
    ptr, elem = p.buffer(s.buffer), elem_of(s.buffer.dtype)
    conv = STORE_CONVERT.get(elem, "")
    base, stride, vector, lanes = flat_offset(s.buffer, s.indices, p.sim)
    if lanes_of(s.value.dtype) != lanes:
        raise CodegenError(f"store to {s.buffer.name!r}: a {s.value.dtype} value at {lanes}-lane indices")
    value = p.expr(s.value)
    if lanes == 1:
        p.emit(f"{ptr}[{p.expr(base)}] = {conv}({value});" if conv else f"{ptr}[{p.expr(base)}] = {value};")
        return
    v = p.tmp()
    head = f"{{ {p.ctype(s.value.dtype)} {v} = {value};"
    if vector is None and not conv and is_const(stride, 1):
        p.emit(f"{head} __builtin_memcpy(&{ptr}[{p.expr(base)}], &{v}, sizeof({v})); }}")
        return
    decls, at, _ = p.element_index(s.buffer, s.indices)
    lane = p.tmp()
    p.emit(f"{head} {' '.join(decls)} for (int {lane} = 0; {lane} < {lanes}; ++{lane}) "
           f"{ptr}[{at(lane)}] = {conv}({v}[{lane}]); }}")


def _loop_pragma(p: FunctionPrinter, s: S.For) -> str | None:
    simd = s.kind is S.ForKind.VECTORIZED or dict(s.annotations).get("simd", False)
    if p.in_simd:
        return None
    if s.kind is S.ForKind.PARALLEL and not p.in_parallel:
        return "#pragma omp parallel for" + (" simd" if simd else "")
    if simd:
        return "#pragma omp simd"
    if s.kind is S.ForKind.UNROLLED or dict(s.annotations).get("unroll_hint", False):
        n = s.extent.value if isinstance(s.extent, E.IntImm) else UNROLL_UNKNOWN_EXTENT
        return f"#pragma GCC unroll {max(1, min(n, 65534))}"
    return None


def _clamp_halves(s: S.For, pragma: str | None) -> tuple[S.For, S.For] | None:
    """A simd loop that stores min(max(x, lo), hi) (a fused Clip / relu6, either nesting, float constants
    as bounds) as two loops: the outer bound applied in place to what the first stored. In one loop gcc
    folds the two selects into one mask expression (10 compare/blend/mask ops a vector for NaN-exact
    bounds); apart, each is one IEEE max/min. mobilenet_v2's 3x3 depthwise on 14x14x384, timed alone
    with its data in cache, 1 thread: 57 -> 78 GFLOP/s (84 with no clamp at all); inside the model,
    where its input comes from L2, 1-6%."""
    body = s.body
    if pragma is None or "simd" not in pragma or not isinstance(body, S.BufferStore):
        return None
    v = body.value
    if not (isinstance(v, (E.Min, E.Max)) and isinstance(v.a, (E.Min, E.Max)) and type(v.a) is not type(v)
            and isinstance(v.b, E.FloatImm) and isinstance(v.a.b, E.FloatImm)):
        return None
    # exact only where the store keeps the value as it is (not float16's rounding) and x reads nothing the
    # first loop overwrites
    if body.buffer.dtype != v.dtype or v.dtype not in ("float32", "float64") or \
            any(isinstance(x, E.BufferLoad) and x.buffer is body.buffer for x in walk(v)):
        return None
    first = S.For(s.loop_var, s.min, s.extent, s.kind, S.BufferStore(body.buffer, v.a, body.indices), s.annotations)
    j = E.Var(s.loop_var.name, s.loop_var.dtype)
    idx = tuple(substitute(i, {s.loop_var: j}) for i in body.indices)
    second = S.For(j, s.min, s.extent, s.kind,
                   S.BufferStore(body.buffer, type(v)(E.BufferLoad(body.buffer, idx), v.b), idx), s.annotations)
    return first, second


def _for(p: FunctionPrinter, s: S.For) -> None:
    pragma = _loop_pragma(p, s)
    for loop in _clamp_halves(s, pragma) or (s,):  # the halves keep the loop's kind, so its pragma
        _for_one(p, loop, pragma)


def _for_one(p: FunctionPrinter, s: S.For, pragma: str | None) -> None:
    i, ty = p.declare(s.loop_var), p.ctype(s.loop_var.dtype)
    end = s.extent if is_const(s.min, 0) else E.Add(s.min, s.extent)
    if pragma:
        p.emit(pragma)
    p.emit(f"for ({ty} {i} = {p.expr(s.min)}; {i} < {p.expr(end)}; ++{i}) {{")
    saved = p.in_parallel, p.in_simd
    p.in_parallel |= pragma is not None and "parallel" in pragma
    p.in_simd |= pragma is not None and "simd" in pragma
    with p.sim.scope(s.loop_var, loop_range(p.sim, s.min, s.extent)):
        p.loop_entry(s, pragma)
        p.block(s.body)
    p.in_parallel, p.in_simd = saved
    p.emit("}")


def _if(p: FunctionPrinter, s: S.IfThenElse) -> None:
    p.emit(f"if ({p.expr(s.cond)}) {{")
    p.block(s.then_case)
    if s.else_case is not None:
        p.emit("} else {")
        p.block(s.else_case)
    p.emit("}")


def _let(p: FunctionPrinter, s: S.LetStmt) -> None:
    p.emit("{")
    p.depth += 1
    p.emit(f"{p.ctype(s.var.dtype)} {p.declare(s.var)} = {p.expr(s.value)};")
    if is_int(s.var.dtype) and lanes_of(s.var.dtype) == 1:
        with p.sim.scope(s.var, p.sim.bound(s.value)):
            p.stmt(s.body)
    else:
        p.stmt(s.body)
    p.depth -= 1
    p.emit("}")


def _allocate(p: FunctionPrinter, s: S.Allocate) -> None:
    buf = s.buffer
    ct = p.rules.storage_ctype.get(elem_of(buf.dtype))
    if ct is None or lanes_of(buf.dtype) != 1:
        raise CodegenError(f"allocation {buf.name!r}: the C backend cannot store dtype {buf.dtype!r}")
    count = E.IntImm(1)
    for d in buf.shape:
        count = mul(count, d)
    name = p.scope.get(buf, buf.name)
    p.emit("{")
    p.depth += 1
    if isinstance(count, E.IntImm) and count.value * SIZEOF[ct] <= STACK_ALLOC_MAX_BYTES:
        p.emit(f"{ct} {name}[{max(count.value, 1)}] __attribute__((aligned(64)));")
        p.stmt(s.body)
    else:
        p.uses_error_flag = True
        p.emit(f"{ct}* {name} = ({ct}*)kiln_alloc((int64_t)({p.expr(count)}) * (int64_t)sizeof({ct}));")
        p.emit(f"if ({name} == NULL) {{ __atomic_store_n(&{ERROR_FLAG}, KILN_ERR_ALLOC, __ATOMIC_RELAXED); }}"
               " else {")
        p.heap.append(name)
        p.block(s.body)
        p.heap.pop()
        p.free(name)
        p.emit("}")
    p.depth -= 1
    p.emit("}")


def _evaluate(p: FunctionPrinter, s: S.Evaluate) -> None:
    """A call of a runtime-library function (an ExternOp) takes buffers: spelled by runtime_lib."""
    if isinstance(s.value, E.Call) and s.value.name in runtime_lib.RUNTIME_FUNCS:
        p.uses_error_flag = True  # declares the error flag the call reports into
        runtime_lib.emit_call(p, s.value, ERROR_FLAG)
        return
    p.emit(f"(void){p.expr(s.value)};")


def _seq(p: FunctionPrinter, s: S.SeqStmt) -> None:
    for x in s.stmts:
        p.stmt(x)


STMT_RULES: dict[type, Callable[[FunctionPrinter, S.Stmt], None]] = {
    S.BufferStore: _store, S.For: _for, S.IfThenElse: _if, S.LetStmt: _let, S.Allocate: _allocate,
    S.SeqStmt: _seq, S.Evaluate: _evaluate,
}
