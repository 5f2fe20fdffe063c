"""DESIGN.md's layers: the runtime only loads and runs compiled code (no module of kiln/runtime imports a
compiler package), and the target and version modules sit at the bottom (they import only kiln.errors).
Imports inside functions count too."""

from tests.imports import KILN, compiler_side, imported_on_load, upward

COMPILER_PACKAGES = ("kiln.transform", "kiln.te", "kiln.tir", "kiln.topi", "kiln.tune", "kiln.frontend", "kiln.compiler")
ABOVE_ERRORS = ("kiln.ir", "kiln.op", "kiln.transform", "kiln.tir", "kiln.te", "kiln.topi", "kiln.codegen", "kiln.tune",
                "kiln.compiler", "kiln.runtime", "kiln.frontend", "kiln.models", "kiln.session", "kiln.cli")


def test_the_runtime_imports_no_compiler_package():
    found = upward(sorted((KILN / "runtime").rglob("*.py")), COMPILER_PACKAGES)
    assert not found, "kiln/runtime imports compiler packages:\n" + "\n".join(found)


def test_the_target_and_version_import_nothing_above_errors():
    assert upward([KILN / "target.py", KILN / "version.py"], ABOVE_ERRORS) == []


def test_the_check_sees_a_compiler_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from kiln.tir.stmt import Buffer\n    from kiln import te\n")
    assert upward([module], COMPILER_PACKAGES) == [f"{module}: kiln.tir.stmt", f"{module}: kiln.te"]


def test_importing_the_runtime_loads_nothing_of_the_compiler_side():
    """Transitively, at module level: the seam where the runtime compiles (kiln.runtime.specialize's
    callback) and the session's build are imported inside functions, when first needed."""
    roots = sorted((KILN / "runtime").rglob("*.py")) + [KILN / "session.py", KILN / "__init__.py"]
    assert compiler_side(imported_on_load(roots)) == []


def test_the_transitive_check_sees_an_indirect_import_and_skips_type_checking_ones(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("from typing import TYPE_CHECKING\nfrom kiln.codegen.lower_fused import Kernel\n"
                      "if TYPE_CHECKING:\n    from kiln.compiler import build\n")
    found = compiler_side(imported_on_load([module]))
    assert "kiln.te" in found and "kiln.topi" in found and "kiln.compiler" not in found
