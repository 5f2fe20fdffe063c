"""How each tir expression is spelled in C.

Two tables: LEAF_RULES spell nodes from the node itself (immediates, variables, loads, vectors);
SCALAR_RULES spell an operation from its already-spelled operands. A vector operation GCC's vector
extensions support natively (VECTOR_NATIVE) is spelled like the scalar one; any other runs its scalar
rule lane by lane inside a GNU statement expression. The printer looks the tables up in the CRules
it is given (kiln.codegen.c_rules), so a later backend overrides only what differs. Temporaries are
`_kN`: names from models never start with `_`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from kiln.codegen import intrinsics
from kiln.codegen.c_types import (
    HELPER_SUFFIX,
    LOAD_CONVERT,
    NARROW_INTS,
    ROUND_HELPER,
    SMALL_FLOAT_SUFFIX,
    SUB_BYTE_WRAP,
    UNSIGNED_INTS,
    CodegenError,
    ModuleDecls,
    is_float_value,
    scalar_ctype,
)
from kiln.codegen.names import NameScope
from kiln.codegen.offsets import flat_offset, is_const
from kiln.ir.dtype import to_numpy
from kiln.tir import expr as E
from kiln.tir.arith import Simplifier
from kiln.tir.bound import VarBounds
from kiln.tir.expr import elem_of, lanes_of

if TYPE_CHECKING:
    from kiln.codegen.c_rules import CRules


def operands(e: E.PrimExpr) -> list[E.PrimExpr]:
    if isinstance(e, (E.BinaryOp, E.CmpOp, E.And, E.Or)):
        return [e.a, e.b]
    if isinstance(e, E.Not):
        return [e.a]
    if isinstance(e, E.Select):
        return [e.cond, e.t, e.f]
    if isinstance(e, E.Cast):
        return [e.value]
    if isinstance(e, E.Call):
        return list(e.args)
    raise CodegenError(f"the C backend cannot spell tir node {type(e).__name__}")


class ExprPrinter:
    """Spells the expressions of one function by `rules`; identifiers come from `scope`."""

    def __init__(self, rules: CRules, scope: NameScope, decls: ModuleDecls, bounds: VarBounds | None = None):
        self.rules, self.scope, self.decls = rules, scope, decls
        self.sim = Simplifier(bounds)  # the enclosing loops' bounds (c_stmt scopes them): simplifies offsets
        self._ntmp = 0

    def tmp(self) -> str:
        self._ntmp += 1
        return f"_k{self._ntmp}"

    def ctype(self, dtype: str) -> str:
        return self.decls.ctype(dtype)

    def expr(self, e: E.PrimExpr) -> str:
        leaf = self.rules.leaf.get(type(e))
        if leaf is not None:
            return leaf(self, e)
        rule = self.rules.scalar.get(type(e))
        if rule is None:
            raise CodegenError(f"the C backend cannot spell tir node {type(e).__name__}")
        ops = operands(e)
        lanes = [lanes_of(o.dtype) for o in ops] + [lanes_of(e.dtype)]
        if max(lanes) == 1:
            return wrap_sub_byte(e, rule(self, e, [self.expr(o) for o in ops]))
        native = self.rules.vector_native.get(type(e))
        if native is not None and min(lanes) == max(lanes) and native[1](e) and elem_of(e.dtype) not in SUB_BYTE_WRAP:
            return f"({self.expr(ops[0])} {native[0]} {self.expr(ops[1])})"
        if lanes_of(e.dtype) != max(lanes):  # NOTE: `-vec` builds Sub(scalar 0, vec), typed scalar
            raise CodegenError(f"{type(e).__name__} of dtype {e.dtype} has {max(lanes)}-lane operands; "
                               "Broadcast the scalar side")
        return self.lanewise(e.dtype, ops, lambda args: wrap_sub_byte(e, rule(self, e, args)))

    def lanewise(self, dtype: str, ops: list[E.PrimExpr], spell: Callable[[list[str]], str]) -> str:
        """A vector of `dtype` whose lane l is spell(lane l of each operand); scalars are shared."""
        decls, elems, lane = [], [], self.tmp()
        for o in ops:
            t = self.tmp()
            decls.append(f"{self.ctype(o.dtype)} {t} = {self.expr(o)};")
            elems.append(f"{t}[{lane}]" if lanes_of(o.dtype) > 1 else t)
        return self.vector_loop(dtype, decls, lambda r: f"{r}[{lane}] = {spell(elems)};", lane)

    def vector_loop(self, dtype: str, decls: list[str], body: Callable[[str], str], lane: str | None = None) -> str:
        lane = lane or self.tmp()
        r = self.tmp()
        return (f"({{ {' '.join(decls)} {self.ctype(dtype)} {r}; "
                f"for (int {lane} = 0; {lane} < {lanes_of(dtype)}; ++{lane}) {body(r)} {r}; }})")

    def declare(self, v: E.Var) -> str:
        """The identifier of a variable at its binding site (parameter, loop, let)."""
        return self.scope.get(v, v.name)

    def var(self, v: E.Var) -> str:
        name = self.scope.lookup(v)
        if name is None:
            raise CodegenError(f"variable {v.name!r} is used but not bound (not a parameter, loop or let)")
        return name

    def buffer(self, buf) -> str:
        name = self.scope.lookup(buf)
        if name is None:
            raise CodegenError(f"buffer {buf.name!r} is used but is neither a parameter nor allocated")
        return name

    # -- loads: offsets shared with stores ------------------------------------------------------
    def element_index(self, buf, indices: tuple[E.PrimExpr, ...]) -> tuple[list[str], Callable[[str], str], int]:
        """(declarations, lane -> element index spelling, lanes) of an access to `buf`."""
        base, stride, vector, lanes = flat_offset(buf, indices, self.sim)
        if vector is not None:
            o = self.tmp()
            return [f"{self.ctype(vector.dtype)} {o} = {self.expr(vector)};"], lambda lane: f"{o}[{lane}]", lanes
        b = self.tmp()
        decls = [f"int64_t {b} = {self.expr(base)};"]
        if isinstance(stride, E.IntImm):
            return decls, lambda lane: f"{b} + {lane} * {stride.value}", lanes
        s = self.tmp()
        return decls + [f"int64_t {s} = {self.expr(stride)};"], lambda lane: f"{b} + {lane} * {s}", lanes

    def load(self, e: E.BufferLoad) -> str:
        ptr, elem = self.buffer(e.buffer), elem_of(e.buffer.dtype)
        conv = LOAD_CONVERT.get(elem, "")
        if lanes_of(e.dtype) == 1:
            base, _, _, _ = flat_offset(e.buffer, e.indices, self.sim)
            return f"{conv}({ptr}[{self.expr(base)}])" if conv else f"{ptr}[{self.expr(base)}]"
        base, stride, vector, _ = flat_offset(e.buffer, e.indices, self.sim)
        if vector is None and not conv and is_const(stride, 1):
            r = self.tmp()
            return (f"({{ {self.ctype(e.dtype)} {r}; __builtin_memcpy(&{r}, &{ptr}[{self.expr(base)}], "
                    f"sizeof({r})); {r}; }})")
        decls, at, _ = self.element_index(e.buffer, e.indices)
        lane = self.tmp()
        return self.vector_loop(e.dtype, decls, lambda r: f"{r}[{lane}] = {conv}({ptr}[{at(lane)}]);", lane)


# -- leaves -------------------------------------------------------------------------------------
def int_literal(v: int, dtype: str) -> str:
    elem = elem_of(dtype)
    if elem == "bool":
        return "1" if v else "0"
    if v in (-(2 ** 63), -(2 ** 31)) and elem in ("int64", "int32"):
        return f"({v + 1}{'LL' if elem == 'int64' else ''} - 1)"
    suffix = {"int64": "LL", "uint64": "ULL", "int32": "", "uint32": "U"}.get(elem)
    if suffix is None:
        return f"(({scalar_ctype(elem)}){v})"
    return f"({v}{suffix})" if v < 0 else f"{v}{suffix}"


def float_literal(v: float, dtype: str) -> str:
    ct, elem = scalar_ctype(dtype), elem_of(dtype)
    if elem in ROUND_HELPER:  # the value the dtype can hold
        v = float(np.asarray(v, dtype=to_numpy(elem)))
    if v != v:
        return f"(({ct})NAN)"
    if math.isinf(v):
        return f"(({ct}){'-' if v < 0 else ''}INFINITY)"
    s = v.hex() + ("" if ct == "double" else "f")
    return f"({s})" if s.startswith("-") else s


def _let(p: ExprPrinter, e: E.Let) -> str:
    return f"({{ {p.ctype(e.var.dtype)} {p.declare(e.var)} = {p.expr(e.value)}; {p.expr(e.body)}; }})"


def _ramp(p: ExprPrinter, e: E.Ramp) -> str:
    b = p.tmp()
    decls = [f"{p.ctype(e.base.dtype)} {b} = {p.expr(e.base)};"]
    if isinstance(e.stride, E.IntImm):
        lanes = [f"{b} + {int_literal(k * e.stride.value, e.base.dtype)}" for k in range(e.lanes)]
    else:
        s = p.tmp()
        decls.append(f"{p.ctype(e.stride.dtype)} {s} = {p.expr(e.stride)};")
        lanes = [f"{b} + {k} * {s}" for k in range(e.lanes)]
    return f"({{ {' '.join(decls)} ({p.ctype(e.dtype)}){{{', '.join(lanes)}}}; }})"


def _broadcast(p: ExprPrinter, e: E.Broadcast) -> str:
    v = p.tmp()
    return (f"({{ {p.ctype(e.value.dtype)} {v} = {p.expr(e.value)}; "
            f"({p.ctype(e.dtype)}){{{', '.join([v] * e.lanes)}}}; }})")


LEAF_RULES: dict[type, Callable[[ExprPrinter, E.PrimExpr], str]] = {
    E.IntImm: lambda p, e: int_literal(e.value, e.dtype),
    E.FloatImm: lambda p, e: float_literal(e.value, e.dtype),
    E.Var: lambda p, e: p.var(e),
    E.Let: _let,
    E.Ramp: _ramp,
    E.Broadcast: _broadcast,
    E.BufferLoad: lambda p, e: p.load(e),
}


# -- operations on spelled operands ------------------------------------------------------------
def wrap(dtype: str, s: str) -> str:
    """C promotes narrow ints to int: cast back so results wrap like the dtype."""
    return f"(({scalar_ctype(dtype)}){s})" if elem_of(dtype) in NARROW_INTS else s


def wrap_sub_byte(e: E.PrimExpr, s: str) -> str:
    """An int4/uint4/int2/uint2 result (computed in a wider C type) reduced back into its range;
    casts, selects and comparisons already give values in range."""
    fn = SUB_BYTE_WRAP.get(elem_of(e.dtype))
    return s if fn is None or isinstance(e, (E.Cast, E.Select)) else f"{fn}({s})"


def infix(op: str) -> Callable:
    return lambda p, e, a: wrap(e.dtype, f"({a[0]} {op} {a[1]})")


def helper(name: str) -> Callable:
    return lambda p, e, a: f"kiln_{name}_{HELPER_SUFFIX[scalar_ctype(e.dtype)]}({a[0]}, {a[1]})"


def _fsuffix(dtype: str) -> str:
    return "" if scalar_ctype(dtype) == "double" else "f"


def _trunc_div(p, e, a):
    return f"trunc{_fsuffix(e.dtype)}({a[0]} / {a[1]})" if is_float_value(e.dtype) else infix("/")(p, e, a)


def _trunc_mod(p, e, a):
    return f"fmod{_fsuffix(e.dtype)}({a[0]}, {a[1]})" if is_float_value(e.dtype) else infix("%")(p, e, a)


def _floor_div(p, e, a):
    if is_float_value(e.dtype):
        return f"floor{_fsuffix(e.dtype)}({a[0]} / {a[1]})"
    return infix("/")(p, e, a) if elem_of(e.dtype) in UNSIGNED_INTS else helper("floordiv")(p, e, a)


def _floor_mod(p, e, a):
    return infix("%")(p, e, a) if elem_of(e.dtype) in UNSIGNED_INTS else helper("floormod")(p, e, a)


def _cast(p, e, a):
    """Casts round like numpy and ml_dtypes: double -> float16 rounds once (through float rounded to odd),
    double -> ml_dtypes floats through float; floats reach sub-byte ints through int32, integers wrap."""
    src, dst = elem_of(e.value.dtype), elem_of(e.dtype)
    if dst == "bool":
        return f"({a[0]} != 0)"
    if dst in ROUND_HELPER:
        if src == dst:
            return a[0]
        odd = src == "float64" and dst == "float16"
        return f"{ROUND_HELPER[dst]}({'kiln_f64_to_f32_odd' if odd else '(float)'}({a[0]}))"
    if dst in SUB_BYTE_WRAP:
        if src == dst:
            return a[0]
        return f"{SUB_BYTE_WRAP[dst]}({'kiln_trunc_i32' if is_float_value(src) else '(int64_t)'}({a[0]}))"
    return f"(({scalar_ctype(dst)}){a[0]})"


def _call(p, e, a):
    """Intrinsics; a reinterpret to or from float8/float4 (values are floats) goes through its byte."""
    if e.name == "reinterpret":  # NOTE: vector calls are spelled lane by lane, so `a` are scalars
        src, dst = elem_of(e.args[0].dtype), elem_of(e.dtype)
        if dst in SMALL_FLOAT_SUFFIX:
            return f"kiln_{SMALL_FLOAT_SUFFIX[dst]}_to_f32((uint8_t){a[0]})"
        if src in SMALL_FLOAT_SUFFIX:
            return f"(({scalar_ctype(dst)})kiln_f32_to_{SMALL_FLOAT_SUFFIX[src]}({a[0]}))"
    return intrinsics.spell(p, e, a)


SCALAR_RULES: dict[type, Callable[[ExprPrinter, E.PrimExpr, list[str]], str]] = {
    E.Add: infix("+"), E.Sub: infix("-"), E.Mul: infix("*"), E.Div: infix("/"),
    E.TruncDiv: _trunc_div, E.TruncMod: _trunc_mod, E.FloorDiv: _floor_div, E.FloorMod: _floor_mod,
    E.Min: helper("min"), E.Max: helper("max"),
    E.EQ: infix("=="), E.NE: infix("!="), E.LT: infix("<"), E.LE: infix("<="), E.GT: infix(">"), E.GE: infix(">="),
    E.And: infix("&&"), E.Or: infix("||"), E.Not: lambda p, e, a: f"(!{a[0]})",
    E.Select: lambda p, e, a: f"({a[0]} ? {a[1]} : {a[2]})",
    E.Cast: _cast,
    E.Call: _call,
}

_always = lambda e: True
_int_only = lambda e: not is_float_value(e.dtype)
_unsigned = lambda e: elem_of(e.dtype) in UNSIGNED_INTS
# vector ops GCC spells natively, element-wise without promotion: (operator, when it applies)
VECTOR_NATIVE: dict[type, tuple[str, Callable[[E.PrimExpr], bool]]] = {
    E.Add: ("+", _always), E.Sub: ("-", _always), E.Mul: ("*", _always), E.Div: ("/", _always),
    E.TruncDiv: ("/", _int_only), E.TruncMod: ("%", _int_only), E.FloorDiv: ("/", _unsigned),
    E.FloorMod: ("%", _unsigned),
}

