"""Names from model files never reach C unsanitized, and stay unique."""

import re

import numpy as np
import pytest

from kiln.codegen import CodegenError, generate
from kiln.codegen.names import NameScope, clean
from kiln.tir import Broadcast, Buffer, BufferStore, FloatImm, For, ForKind, IntImm, Max, PrimFunc, Ramp, Sub, Var

from .conftest import requires_gcc

EVIL = ['x"); system("id"); //', "*/ int main(){", "int", "linux", "NAN", "INT64_MAX", "expf", "kiln_fn_f",
        "_kerr", "__x", "9lives", "", "ä-ö", "size_t", "A" * 300, "main", "exp"]


@pytest.mark.parametrize("name", EVIL)
def test_clean_is_a_safe_identifier(name):
    c = clean(name)
    assert re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", c) and len(c) <= 64
    assert c not in ("int", "linux", "NAN", "INT64_MAX", "expf", "main", "exp", "size_t")
    assert not c.startswith(("kiln", "_"))


def test_scope_keeps_names_unique():
    scope = NameScope()
    objs = [object() for _ in range(4)]
    names = [scope.get(o, "a b") for o in objs] + [scope.get(objs[0], "other")]
    assert names == ["a_b", "a_b_1", "a_b_2", "a_b_3", "a_b"]


def evil_func(fname: str):
    """Every model name evil; two buffers share one name."""
    i = Var(EVIL[0])
    bufs = [Buffer(n, (IntImm(8),), "float32") for n in EVIL]
    twin = Buffer(EVIL[0], (IntImm(8),), "float32")
    body = For(i, IntImm(0), IntImm(8), ForKind.SERIAL,
               BufferStore(twin, sum((b[i] for b in bufs[1:]), bufs[0][i]), (i,)))
    return PrimFunc(fname, (*bufs, twin), body)


@requires_gcc
def test_evil_names_compile_and_run(cache):
    from kiln.codegen import build_library

    funcs = [evil_func(n) for n in ('f"); system("id"); //', "main", "exp", "f_system_id")]
    module = build_library(funcs, 'm"; rm -rf /', cache=cache)
    assert "system(" not in module.source.code and "rm -rf" not in module.source.code
    ins = [np.full(8, k, np.float32) for k in range(len(EVIL))]
    for f in funcs:
        out = np.empty(8, np.float32)
        module.get_function(f.name)(*ins, out)
        np.testing.assert_array_equal(out, sum(range(len(EVIL))))


def test_duplicate_function_names_are_rejected():
    with pytest.raises(CodegenError, match="two functions"):
        generate([evil_func("f"), evil_func("f")])


def test_mixed_lanes_are_rejected():
    i = Var("i")
    A = Buffer("A", (IntImm(8),), "float32")
    bad = Max(Broadcast(FloatImm(1.0), 8), Sub(FloatImm(0.0), A[Ramp(IntImm(0), IntImm(1), 8)]))  # `-vec`
    f = PrimFunc("neg", (A,), For(i, IntImm(0), IntImm(1), ForKind.SERIAL,
                                  BufferStore(A, bad, (Ramp(IntImm(0), IntImm(1), 8),))))
    with pytest.raises(CodegenError, match="Broadcast the scalar"):
        generate([f])


def test_unbound_variable_is_a_codegen_error():
    i, n = Var("i"), Var("n")
    A = Buffer("A", (n,), "float32")
    f = PrimFunc("unbound", (A,), For(i, IntImm(0), n, ForKind.SERIAL, BufferStore(A, FloatImm(0.0), (i,))))
    with pytest.raises(CodegenError, match="'n' is used but not bound"):
        generate([f])
