"""tir PrimFuncs -> one self-contained C99 (gnu11) module.

Every function gets the uniform ABI `int32_t kiln_fn_NAME(const kiln_value_t* args, int32_t num_args)`
(buffers as `.p`, integer scalars as `.i`, float scalars as `.f`, in parameter order; 0 means success)
so ctypes and a generated C main call any kernel the same way. It unpacks into a typed
`kiln_body_NAME` (static unless the compiler builds the module as several translation units, see
kiln.codegen.cache), which code in the same module (an AOT main) may call directly.

Each function is rendered on its own (`render`: symbols are placeholders, the module-wide
declarations it needs travel with it), so a kernel cache can store the rendering and a later build
assembles the module without lowering or printing again. `UNIT_MARK` starts each function's part.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kiln.codegen import runtime_lib
from kiln.codegen.c_rules import C_RULES, CRules
from kiln.codegen.c_stmt import EXIT_LABEL, FunctionPrinter
from kiln.codegen.c_types import BODY_SYMBOL, ERROR_FLAG, CodegenError, ModuleDecls, is_float_value, scalar_ctype
from kiln.codegen.names import NameScope
from kiln.tir.expr import Var, elem_of
from kiln.tir.stmt import Buffer, PrimFunc
from kiln.tir.transform.simplify import shape_bounds

RUNTIME_HEADER = Path(__file__).with_name("kiln_runtime.h")


@dataclass(frozen=True)
class FuncInfo:
    """Where a PrimFunc ended up in the module."""

    func: PrimFunc
    symbol: str  # the exported uniform-ABI entry
    body_symbol: str  # the typed body (KILN_BODY linkage)


@dataclass(frozen=True)
class CSource:
    code: str
    functions: dict[str, FuncInfo]  # by PrimFunc name


# a PrimFunc attr holding its RenderedFunc (a kernel from the kernel cache has no loops to print)
RENDERED_ATTR = "c_rendered"
UNIT_MARK = "/* kiln:unit */"  # starts each function's part of the module (cache.py splits there)
_FN, _BODY = "@KILN_FN@", BODY_SYMBOL  # symbol placeholders: '@' never appears in generated C
_LINKAGE = "#ifndef KILN_BODY\n#define KILN_BODY static\n#endif"


@dataclass(frozen=True)
class RenderedFunc:
    """One function's C with placeholder symbols, and the module declarations it needs (in order)."""

    code: str
    vector_types: tuple[tuple[str, str], ...] = ()
    externs: tuple[tuple[str, str], ...] = ()
    prototype: str = ""  # the typed body's declaration, placeholder symbol
    body: Any = field(default=None, compare=False, repr=False)  # the Stmt it renders: a rewritten body re-renders
    rules: Any = field(default=None, compare=False, repr=False)  # the CRules it was rendered with


def render(f: PrimFunc, rules: CRules = C_RULES) -> RenderedFunc:
    """`f`'s C, independent of the module it ends up in (its printer's names are its own). A rendering
    cached on `f` (RENDERED_ATTR, the kernel cache's) is reused when it was made with `rules`."""
    cached = f.attr(RENDERED_ATTR)
    if cached is not None and cached.body is f.body and cached.rules is rules:
        return cached
    decls = ModuleDecls()
    code, head = _function(FuncInfo(f, _FN, _BODY), decls, rules)
    return RenderedFunc(code, tuple(decls.vector_types.items()), tuple(decls.externs.items()),
                        head.removesuffix(" {") + ";", f.body, rules)


def generate(funcs: Sequence[PrimFunc], rules: CRules = C_RULES, header: Path = RUNTIME_HEADER) -> CSource:
    """One module of `funcs` spelled by `rules`, after `header` (the runtime the rules' spellings call)."""
    decls, module_scope = ModuleDecls(), NameScope()
    infos: dict[str, FuncInfo] = {}
    bodies: list[str] = []
    protos: list[str] = []
    for f in funcs:
        if f.name in infos:
            raise CodegenError(f"two functions are named {f.name!r}")
        c = module_scope.get(f, f.name)
        info = FuncInfo(f, f"kiln_fn_{c}", f"kiln_body_{c}")
        infos[f.name] = info
        r = render(f, rules)
        for name, typedef in r.vector_types:
            decls.vector_types.setdefault(name, typedef)
        for name, proto in r.externs:
            decls.extern(name, proto)
        protos.append(r.prototype.replace(_BODY, info.body_symbol))
        bodies += [UNIT_MARK, r.code.replace(_FN, info.symbol).replace(_BODY, info.body_symbol)]
    code = "\n".join([header.read_text(), runtime_lib.source(funcs), *decls.lines(), _LINKAGE, *protos, "",
                      *bodies])
    return CSource(code, infos)


def _param_decl(p: Buffer | Var, ident: str, restrict: bool, rules: CRules) -> str:
    if isinstance(p, Buffer):
        ct = rules.storage_ctype.get(elem_of(p.dtype))
        if ct is None:
            raise CodegenError(f"parameter {p.name!r}: the C backend cannot store dtype {p.dtype!r}")
        return f"{ct}* {'restrict ' if restrict else ''}{ident}"
    return f"{scalar_ctype(p.dtype)} {ident}"


def _unpack(p: Buffer | Var, k: int, rules: CRules) -> str:
    if isinstance(p, Buffer):
        return f"({rules.storage_ctype[elem_of(p.dtype)]}*)args[{k}].p"
    return f"({scalar_ctype(p.dtype)})args[{k}].{'f' if is_float_value(p.dtype) else 'i'}"


def _function(info: FuncInfo, decls: ModuleDecls, rules: CRules) -> tuple[str, str]:
    """(the code, the typed body's first line): the body and its uniform-ABI wrapper, after any
    file-scope code the body needs. Buffers are `restrict` only when the PrimFunc says its buffers
    never alias (attr noalias=True)."""
    f = info.func
    printer = FunctionPrinter(rules, NameScope(), decls, shape_bounds(f))
    printer.func = f
    restrict = bool(f.attr("noalias", False))
    params = [_param_decl(p, printer.scope.get(p, p.name), restrict, rules) for p in f.params]
    # data-dependent dims (set by runtime-library calls) are in-out: a local copy, written back
    inout = {v: printer.scope.fresh(f"{v.name}_inout") for v in runtime_lib.data_dependent_vars(f)}
    params = [f"int64_t* {inout[p]}" if p in inout else d for p, d in zip(f.params, params)]
    printer.stmt(f.body)
    head = [f"KILN_BODY int32_t {info.body_symbol}({', '.join(params) or 'void'}) {{"]
    head += [f"  {scalar_ctype(v.dtype)} {printer.var(v)} = ({scalar_ctype(v.dtype)})*{p};"
             for v, p in inout.items()]
    if printer.uses_error_flag:
        head.append(f"  int32_t {ERROR_FLAG} = KILN_OK;")
    tail = [f"{EXIT_LABEL}:;"] if EXIT_LABEL in printer.jumps else []
    tail += [f"  *{p} = (int64_t){printer.var(v)};" for v, p in inout.items()]
    tail += [f"  return {ERROR_FLAG if printer.uses_error_flag else 'KILN_OK'};", "}"]
    # NOTE: the slot of an in-out dim is written through a cast-away const (the caller's array is mutable)
    call = ", ".join(f"(int64_t*)&((kiln_value_t*)args)[{k}].i" if p in inout else _unpack(p, k, rules)
                     for k, p in enumerate(f.params))
    wrapper = [
        f"int32_t {info.symbol}(const kiln_value_t* args, int32_t num_args) {{",
        f"  if (num_args != {len(f.params)}) return KILN_ERR_NUM_ARGS;",
        "  (void)args;" if not f.params else None,
        f"  return {info.body_symbol}({call});",
        "}",
    ]
    code = "\n".join([*printer.preamble, *head, *printer.lines, *tail, *(w for w in wrapper if w is not None), ""])
    return code, head[0]
