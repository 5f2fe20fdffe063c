"""The runtime only loads and runs compiled code: no module of kiln/runtime imports a compiler package
(DESIGN.md's layers). Imports inside functions count too."""

import ast
from pathlib import Path

import kiln

COMPILER_PACKAGES = ("kiln.transform", "kiln.te", "kiln.tir", "kiln.topi", "kiln.tune", "kiln.frontend", "kiln.compiler")
RUNTIME = Path(kiln.__file__).parent / "runtime"


def _imports(path: Path) -> list[str]:
    """Every module `path` imports, by its full name (`from kiln import x` counts as kiln.x)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    return out


def _is_compiler(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in COMPILER_PACKAGES)


def test_the_runtime_imports_no_compiler_package():
    found = [f"{path.relative_to(RUNTIME.parent)}: {name}" for path in sorted(RUNTIME.rglob("*.py"))
             for name in _imports(path) if _is_compiler(name)]
    assert not found, "kiln/runtime imports compiler packages:\n" + "\n".join(found)


def test_the_check_sees_a_compiler_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from kiln.tir.stmt import Buffer\n    from kiln import te\n")
    assert [n for n in _imports(module) if _is_compiler(n)] == ["kiln.tir.stmt", "kiln.tir.stmt.Buffer", "kiln.te"]
