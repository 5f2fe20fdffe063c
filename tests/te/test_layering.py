"""te's evaluator takes extern references from the table topi fills, not from the operator registry;
te's modules share only public names."""

import numpy as np

from kiln.te.eval import EXTERN_FUNCS
from tests.imports import KILN, private_names, upward

TE_FILES = sorted((KILN / "te").rglob("*.py"))


def test_te_imports_nothing_of_op():
    assert upward(TE_FILES, ("kiln.op",)) == []


def test_te_imports_no_private_name():
    assert private_names(TE_FILES) == []


def test_topi_registers_the_extern_references():
    import kiln.topi  # noqa: F401  (the externs' computes register their references)

    assert {"kiln_top_k", "kiln_unique", "kiln_non_zero", "kiln_det", "kiln_dropout"} <= set(EXTERN_FUNCS)
    (nz,) = EXTERN_FUNCS["kiln_non_zero"]([np.array([0, 3, 0, 5])], [])
    np.testing.assert_array_equal(nz, [[1, 3]])
