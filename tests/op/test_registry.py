"""Registry invariants: every operator is documented and exercised by a test input."""

from __future__ import annotations

import os

import kiln.frontend.onnx_ops  # noqa: F401
from kiln.op import REGISTRY

DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "operators.md")


def test_every_operator_is_listed_in_the_docs():
    with open(DOCS) as f:
        text = f.read()
    missing = sorted(n for n in REGISTRY if f"`{n}`" not in text)
    assert not missing, f"regenerate docs/operators.md (scripts/operator_table.py); missing {missing}"


def test_every_operator_has_a_reference_type_relation_and_pattern():
    for name, op in REGISTRY.items():
        assert callable(op.reference) and callable(op.type_rel), name
        assert "." in name and name == name.lower(), f"{name}: names are family.snake_case"
