"""Readable text for tir (`str()` of exprs, stmts and PrimFuncs, and error messages).

One line per statement, blocks in braces: `for (i, 0, 64) parallel {` ... `}`. Infix operators
print with minimal parentheses; `//` and `%` are floor division/modulo, truncdiv/truncmod are C's.
"""

from __future__ import annotations

from kiln.tir import expr as E
from kiln.tir import stmt as S

_INFIX = {E.Add: ("+", 5), E.Sub: ("-", 5), E.Mul: ("*", 6), E.Div: ("/", 6), E.FloorDiv: ("//", 6),
          E.FloorMod: ("%", 6), E.EQ: ("==", 4), E.NE: ("!=", 4), E.LT: ("<", 4), E.LE: ("<=", 4),
          E.GT: (">", 4), E.GE: (">=", 4), E.And: ("&&", 2), E.Or: ("||", 1)}
_CALLS = {E.TruncDiv: "truncdiv", E.TruncMod: "truncmod", E.Min: "min", E.Max: "max"}
_ATOM = 9


def _imm(e: E.PrimExpr) -> str:
    if isinstance(e, E.IntImm):
        if e.dtype == "bool":
            return "true" if e.value else "false"
        return str(e.value) if e.dtype in ("int32", "int64") else f"{e.dtype}({e.value})"
    if e.dtype == "float32":
        return f"{e.value!r}f"
    return repr(e.value) if e.dtype == "float64" else f"{e.dtype}({e.value!r})"


def _prec(e: E.PrimExpr) -> int:
    if type(e) in _INFIX:
        return _INFIX[type(e)][1]
    if isinstance(e, E.Not):
        return 3
    if isinstance(e, E.IntImm | E.FloatImm) and e.value < 0:
        return 7
    return _ATOM


def expr_str(e: E.PrimExpr) -> str:
    """One expression as text."""
    t = type(e)
    if t in _INFIX:
        op, p = _INFIX[t]
        lhs = _wrap(e.a, p if p == 4 else p - 1)  # left-associative, except comparisons
        return f"{lhs} {op} {_wrap(e.b, p)}"
    if t in _CALLS:
        return f"{_CALLS[t]}({expr_str(e.a)}, {expr_str(e.b)})"
    if isinstance(e, E.IntImm | E.FloatImm):
        return _imm(e)
    if isinstance(e, E.Var):
        return e.name
    if isinstance(e, E.Not):
        return f"!{_wrap(e.a, _ATOM - 1)}"
    if isinstance(e, E.Select):
        return f"select({expr_str(e.cond)}, {expr_str(e.t)}, {expr_str(e.f)})"
    if isinstance(e, E.Cast):
        return f"{e.dtype}({expr_str(e.value)})"
    if isinstance(e, E.Call):
        return f"{e.name}({_join(e.args)})"
    if isinstance(e, E.Let):
        return f"(let {e.var.name} = {expr_str(e.value)} in {expr_str(e.body)})"
    if isinstance(e, E.Ramp):
        return f"ramp({expr_str(e.base)}, {expr_str(e.stride)}, {e.lanes})"
    if isinstance(e, E.Broadcast):
        return f"broadcast({expr_str(e.value)}, {e.lanes})"
    if isinstance(e, E.BufferLoad):
        return f"{e.buffer.name}[{_join(e.indices)}]"
    if isinstance(e, E.ProducerLoad):
        return f"{getattr(e.producer, 'name', 'tensor')}({_join(e.indices)})"
    if isinstance(e, E.Reduce):
        axes = ", ".join(getattr(a, "var", a).name for a in e.axis)
        where = "" if e.condition is None else f", where={expr_str(e.condition)}"
        name = getattr(e.combiner, "name", "reduce")
        return f"{name}({_join(e.source)}, axis=[{axes}]{where})"
    return repr(e)


def _wrap(e: E.PrimExpr, prec: int) -> str:
    s = expr_str(e)
    return f"({s})" if _prec(e) <= prec else s


def _join(xs) -> str:
    return ", ".join(expr_str(x) for x in xs)


def buffer_decl(b: S.Buffer) -> str:
    s = f"{b.name}: {b.dtype}[{_join(b.shape)}]"
    if b.strides is not None:
        s += f" strides[{_join(b.strides)}]"
    return s if b.scope == "global" else f"{s} {b.scope}"


def _block(head: str, body: S.Stmt, ind: str) -> list[str]:
    return [f"{ind}{head} {{", *_lines(body, ind + "  "), f"{ind}}}"]


def _lines(s: S.Stmt, ind: str) -> list[str]:
    if isinstance(s, S.SeqStmt):
        return [ln for x in s.stmts for ln in _lines(x, ind)]
    if isinstance(s, S.BufferStore):
        return [f"{ind}{s.buffer.name}[{_join(s.indices)}] = {expr_str(s.value)}"]
    if isinstance(s, S.For):
        kind = "" if s.kind is S.ForKind.SERIAL else f" {s.kind.value}"
        ann = "".join(f" {k}" if v is True else f" {k}={v!r}" for k, v in s.annotations)
        head = f"for ({s.loop_var.name}, {expr_str(s.min)}, {expr_str(s.extent)}){kind}{ann}"
        return _block(head, s.body, ind)
    if isinstance(s, S.IfThenElse):
        out = _block(f"if ({expr_str(s.cond)})", s.then_case, ind)
        if s.else_case is not None:
            out[-1:] = [f"{ind}}} else {{", *_lines(s.else_case, ind + "  "), f"{ind}}}"]
        return out
    if isinstance(s, S.LetStmt):
        return [f"{ind}let {s.var.name} = {expr_str(s.value)}", *_lines(s.body, ind)]
    if isinstance(s, S.Allocate):
        return _block(f"allocate {buffer_decl(s.buffer)}", s.body, ind)
    if isinstance(s, S.Evaluate):
        return [f"{ind}{expr_str(s.value)}"]
    return [f"{ind}{s!r}"]


def stmt_str(s: S.Stmt, indent: int = 0) -> str:
    """A statement tree as indented lines."""
    return "\n".join(_lines(s, " " * indent))


def func_str(f: S.PrimFunc) -> str:
    params = ", ".join(buffer_decl(p) if isinstance(p, S.Buffer) else f"{p.name}: {p.dtype}" for p in f.params)
    return "\n".join([f"func {f.name}({params}) {{", *_lines(f.body, "  "), "}"])


def to_str(node) -> str:
    """Text of any tir node: PrimFunc, Stmt or PrimExpr."""
    if isinstance(node, S.PrimFunc):
        return func_str(node)
    if isinstance(node, S.Stmt):
        return stmt_str(node)
    return expr_str(node)
