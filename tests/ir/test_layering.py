"""ir sits below op in DESIGN's layering: no file of kiln/ir imports kiln.op, not even inside a function
(the attribute helpers and the name -> operator table live in ir for that)."""

from tests.imports import KILN, private_names, upward

IR_FILES = sorted((KILN / "ir").rglob("*.py"))


def test_ir_imports_nothing_of_op():
    assert upward(IR_FILES, ("kiln.op",)) == []


def test_ir_imports_no_private_name():
    assert private_names(IR_FILES) == []


def test_the_check_sees_function_level_imports(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def g():\n    from kiln.op.registry import REGISTRY\n    from kiln import op\n")
    assert len(upward([f], ("kiln.op",))) == 2
