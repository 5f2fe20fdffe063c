"""How tir Call intrinsics are spelled in C: the names kiln.te.eval.INTRINSICS defines, with its
semantics (round = halves away from zero, nearbyint = halves to even). Any other name is a function
of the C runtime library, called verbatim with a prototype built from the call's dtypes."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from kiln.codegen.c_types import ERROR_FLAG, CodegenError, is_float_value, scalar_ctype
from kiln.codegen.names import C_KEYWORDS
from kiln.tir.expr import BufferLoad, elem_of

# math.h functions: float32 (and float16/bfloat16, computed as float) use the `f` variant
MATH = ("exp", "log", "sqrt", "tanh", "erf", "fabs", "floor", "ceil", "round", "nearbyint", "trunc", "sin",
        "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "log1p", "expm1",
        "pow", "fmod")
BITWISE = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^", "shift_left": "<<", "shift_right": ">>"}
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _math(name: str) -> Callable:
    def spell(p, e, a):
        arg_t = e.args[0].dtype
        if is_float_value(arg_t):
            f = name if scalar_ctype(arg_t) == "double" else f"{name}f"
            return f"{f}({', '.join(a)})"
        # integer arguments: compute in double, give the call's type back
        return f"(({scalar_ctype(e.dtype)}){name}({', '.join(f'(double){x}' for x in a)}))"

    return spell


def _abs(p, e, a):
    if is_float_value(e.dtype):
        return _math("fabs")(p, e, a)
    t, ct = p.tmp(), scalar_ctype(e.dtype)
    return f"({{ {ct} {t} = {a[0]}; ({ct})({t} < 0 ? -{t} : {t}); }})"


def _classify(macro: str) -> Callable:
    return lambda p, e, a: f"({macro}({a[0]}) != 0)" if is_float_value(e.args[0].dtype) else "0"


def _sigmoid(p, e, a):
    return f"kiln_sigmoid_{'f64' if scalar_ctype(e.dtype) == 'double' else 'f32'}({a[0]})"


def _bitwise(op: str) -> Callable:
    return lambda p, e, a: f"(({scalar_ctype(e.dtype)})({a[0]} {op} {a[1]}))"


def _reinterpret(p, e, a):
    """Same bits, the call's dtype; float16/bfloat16 values are floats, so convert their bits."""
    src, dst = elem_of(e.args[0].dtype), elem_of(e.dtype)
    halves = {"float16": "f16", "bfloat16": "bf16"}
    if dst in halves:
        return f"kiln_{halves[dst]}_to_f32((uint16_t){a[0]})"
    if src in halves:
        return f"(({scalar_ctype(dst)})kiln_f32_to_{halves[src]}({a[0]}))"
    if dst == "float32" and src in ("int32", "uint32"):  # a function, not a local: vectorizes in nested loops
        return f"kiln_bits_f32((uint32_t){a[0]})"
    if src == "float32" and dst in ("int32", "uint32"):
        return f"(({scalar_ctype(dst)})kiln_f32_bits({a[0]}))"
    s, r = p.tmp(), p.tmp()
    return (f"({{ {scalar_ctype(src)} {s} = {a[0]}; {scalar_ctype(dst)} {r}; "
            f"__builtin_memcpy(&{r}, &{s}, sizeof({r})); {r}; }})")


def _check_index(p, e, a):
    """kiln_check_index (kiln_runtime.h): a bad index sets the kernel's error flag (declared by the
    function printer) and reads 0."""
    p.uses_error_flag = True
    return f"kiln_check_index((int64_t)({a[0]}), (int64_t)({a[1]}), &{ERROR_FLAG})"


INT8_HEADER = Path(__file__).with_name("kiln_int8.h")
# the int8 micro-kernels' parameters: a pointer argument is a BufferLoad, passed as its element's address
_INT8_TILE_PARAMS = ("const uint8_t*", "int64_t", "int64_t", "const int8_t*", "int64_t", "int32_t*", "int64_t",
                     "int64_t", "int32_t")


def _int8_tile(name: str) -> Callable:
    """A register tile of kiln/codegen/kiln_int8.h (kiln/topi/qgemm.py's intrinsic); the header joins the
    module's declarations once, whichever variants the module calls."""

    def spell(p, e, a):
        if len(a) != len(_INT8_TILE_PARAMS):
            raise CodegenError(f"{name} takes {len(_INT8_TILE_PARAMS)} arguments, got {len(a)}")
        p.decls.extern("kiln_int8.h", INT8_HEADER.read_text())
        args = [f"({t})&{x}" if isinstance(arg, BufferLoad) else f"({t}){x}"
                for t, x, arg in zip(_INT8_TILE_PARAMS, a, e.args)]
        return f"({name}({', '.join(args)}), 0)"

    return spell


INTRINSIC_RULES: dict[str, Callable] = {
    **{n: _math(n) for n in MATH},
    **{n: _bitwise(op) for n, op in BITWISE.items()},
    "abs": _abs, "sigmoid": _sigmoid, "isnan": _classify("isnan"), "isinf": _classify("isinf"),
    "bitwise_not": lambda p, e, a: f"(({scalar_ctype(e.dtype)})~{a[0]})",
    "reinterpret": _reinterpret,
    "check_index": _check_index,
    **{f"kiln_i8_tile_{k}": _int8_tile(f"kiln_i8_tile_{k}") for k in ("avx2", "avx2_split", "vnni")},
}


def spell(p, e, a: list[str]) -> str:
    """A call by the printer's intrinsic rules (`p.rules.intrinsic`), else of the runtime library."""
    rule = p.rules.intrinsic.get(e.name)
    if rule is not None:
        return rule(p, e, a)
    if not _IDENT.match(e.name) or e.name in C_KEYWORDS:
        raise CodegenError(f"call to {e.name!r}: not an intrinsic and not a valid C runtime function name")
    params = ", ".join(scalar_ctype(x.dtype) for x in e.args) or "void"
    p.decls.extern(e.name, f"extern {scalar_ctype(e.dtype)} {e.name}({params});")
    return f"{e.name}({', '.join(a)})"
