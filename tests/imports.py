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
