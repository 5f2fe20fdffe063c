"""The kiln imports a source file makes, read from its syntax tree (function-level imports included),
for the layering tests: which module imports which, and which private names cross modules."""

from __future__ import annotations

import ast
from pathlib import Path

KILN = Path(__file__).resolve().parent.parent / "kiln"


def imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names imported from it) for every import in `path`; `import a.b` gives ("a.b", [])."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "kiln":  # `from kiln import op` imports the module kiln.op
                out += [(f"kiln.{a.name}", []) for a in node.names]
            else:
                out.append((node.module, [a.name for a in node.names]))
    return out


def under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _label(f: Path) -> str:
    return str(f.relative_to(KILN.parent)) if f.is_relative_to(KILN.parent) else str(f)


def upward(files: list[Path], packages: tuple[str, ...]) -> list[str]:
    """`file: module` for each import in `files` of a module under one of `packages`."""
    return [f"{_label(f)}: {m}" for f in files for m, _ in imports(f)
            if any(under(m, p) for p in packages)]


def private_names(files: list[Path]) -> list[str]:
    """`file: from module import _name` for each private name imported from another kiln module."""
    return [f"{_label(f)}: from {m} import {n}" for f in files for m, names in imports(f)
            if under(m, "kiln") for n in names if n.startswith("_") and not n.startswith("__")]


# What running a compiled model must not import (issue 35): the compiler side, the ONNX package, and the C
# generator. The loop IR's data types are allowed (RUNTIME_TIR): a kernel's calling convention is a tir
# signature (Buffers whose shapes are expressions over size Vars) that the loader checks arguments against.
COMPILER_SIDE = ("kiln.compiler", "kiln.transform", "kiln.te", "kiln.tir", "kiln.topi", "kiln.tune", "kiln.frontend",
                 "onnx", "kiln.codegen.lower_fused", "kiln.codegen.c_source", "kiln.codegen.c_backend",
                 "kiln.codegen.aot_source", "kiln.codegen.backends", "kiln.codegen.cache")
RUNTIME_TIR = ("kiln.tir", "kiln.tir.expr", "kiln.tir.stmt", "kiln.tir.functor")


def compiler_side(modules: set[str] | list[str]) -> list[str]:
    """The modules of `modules` that running a compiled model must not import, sorted."""
    return sorted(m for m in modules if m not in RUNTIME_TIR and any(under(m, p) for p in COMPILER_SIDE))


def module_file(module: str) -> Path | None:
    """The source file of a kiln module (a package's __init__.py), None for a name that is not one."""
    if not under(module, "kiln"):
        return None
    path = KILN.joinpath(*module.split(".")[1:])
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


def _load_time_nodes(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements that run when a module is imported: the top level, into if/try/with/class bodies,
    not into functions and not into `if TYPE_CHECKING:`."""
    out = []
    for node in body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            out += _load_time_nodes(node.orelse)
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.ClassDef)):
            inner = [getattr(node, f, []) for f in ("body", "orelse", "finalbody")]
            inner += [h.body for h in getattr(node, "handlers", [])]
            out += _load_time_nodes([s for b in inner for s in b])
        else:
            out.append(node)
    return out


def load_time_imports(path: Path) -> set[str]:
    """The modules importing `path` imports itself (`from a import b` counts a.b when it is a module)."""
    out = set()
    for node in _load_time_nodes(ast.parse(path.read_text()).body):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names if module_file(f"{node.module}.{a.name}")}
    return out


def imported_on_load(files: list[Path]) -> set[str]:
    """Every module importing `files` imports, transitively through kiln's sources (with each module's
    parent packages, whose __init__ runs first); modules outside kiln are listed, not followed."""
    seen: set[str] = set()
    todo = [m for f in files for m in load_time_imports(f)]
    while todo:
        module = todo.pop()
        parts = module.split(".")
        for name in (".".join(parts[:k]) for k in range(1, len(parts) + 1)):
            if name not in seen:
                seen.add(name)
                path = module_file(name)
                todo += sorted(load_time_imports(path)) if path is not None else []
    return seen
