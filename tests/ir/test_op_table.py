"""The name -> operator table in ir (TVM's Op.get): kiln.op's define_op fills it, the parser reads it."""

import pytest

import kiln.ir.op_table as table
from kiln.ir import TensorType, Var, parse_expr
from kiln.op import REGISTRY, get_op


def test_the_op_registry_is_the_ir_table():
    assert REGISTRY is table.OPS
    assert table.lookup_op("nn.relu") is get_op("nn.relu")


def test_an_unknown_name_is_a_key_error():
    with pytest.raises(KeyError, match="unknown operator 'nn.nope'"):
        table.lookup_op("nn.nope")


def test_an_empty_table_says_what_to_import(monkeypatch):
    monkeypatch.setattr(table, "OPS", {})
    with pytest.raises(KeyError, match="import kiln.op"):
        table.lookup_op("nn.relu")


def test_an_operator_is_registered_once():
    with pytest.raises(ValueError, match="defined twice"):
        table.register_op(get_op("nn.relu"))


def test_the_parser_finds_operators_in_the_table():
    x = Var("x", TensorType((2,), "float32"))
    assert parse_expr("nn.relu(%x)", free_vars=(x,)).op is table.OPS["nn.relu"]
