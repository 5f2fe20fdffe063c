"""Backends behind one seam: the registry by target kind, and C rule tables a subclass overrides entry
by entry (the rest of its C byte-identical to CBackend's)."""

import difflib

import pytest

from kiln.codegen import CBackend, CodegenError, get_backend
from kiln.codegen.aot_source import KernelCall, Ptr
from kiln.codegen.c_rules import C_RULES
from kiln.tir import Buffer, BufferStore, Call, For, ForKind, IntImm, PrimFunc, Var
from kiln.tir import stmt as S


def sigmoid_kernel() -> PrimFunc:
    i = Var("i")
    A, B = Buffer("A", (IntImm(16),), "float32"), Buffer("B", (IntImm(16),), "float32")
    return PrimFunc("sig", (A, B), For(i, IntImm(0), IntImm(16), ForKind.SERIAL,
                                      BufferStore(B, Call("float32", "sigmoid", (A[i],)), (i,))))


def _sim_for(p, s):
    p.emit("/* sim: loop */")
    C_RULES.stmt[S.For](p, s)


class SimBackend(CBackend):
    """A stand-in for a simulated accelerator: one intrinsic and one statement spelled its own way."""

    kind = "sim"
    rules = C_RULES.extend(intrinsic={"sigmoid": lambda p, e, a: f"sim_sigmoid({a[0]})"},
                           stmt={S.For: _sim_for})


# the loop gets its comment line, the store spells sigmoid its own way; every other line is CBackend's
SIM_CHANGES = ["+   /* sim: loop */", "-     B[i] = kiln_sigmoid_f32(A[i]);", "+     B[i] = sim_sigmoid(A[i]);"]


def changed_lines(base: str, other: str) -> list[str]:
    """The lines `other` drops from (-) or adds to (+) `base`, in order."""
    return [d for d in difflib.ndiff(base.splitlines(), other.splitlines()) if d[0] in "+-"]


def test_registry_finds_the_c_backend_and_names_known_kinds():
    assert isinstance(get_backend("c"), CBackend) and get_backend("c").kind == "c"
    with pytest.raises(CodegenError, match=r"'cuda'.*\['c'\]"):
        get_backend("cuda")


def test_override_changes_only_its_spelling():
    f = sigmoid_kernel()
    base, sim = CBackend().render_kernels([f]).code, SimBackend().render_kernels([f]).code
    assert "sim" not in base
    assert changed_lines(base, sim) == SIM_CHANGES


def test_override_leaves_c_rules_and_aot_entry_alone():
    f = sigmoid_kernel()
    call = KernelCall("sig", (Ptr("input", 0), Ptr("output", 0)))
    base, sim = CBackend().render_aot([f], [call], []).code, SimBackend().render_aot([f], [call], []).code
    assert changed_lines(base, sim) == SIM_CHANGES
    assert C_RULES.intrinsic["sigmoid"] is not SimBackend.rules.intrinsic["sigmoid"]
    assert "sim" not in CBackend().render_kernels([f]).code


def test_extend_rejects_an_unknown_table():
    with pytest.raises(TypeError, match="intrinsics"):
        C_RULES.extend(intrinsics={})


def test_runtime_header_is_the_backends(tmp_path):
    f = sigmoid_kernel()
    header = tmp_path / "sim_runtime.h"
    header.write_text("/* sim runtime */")
    backend = CBackend()
    backend.runtime_header = header
    base = CBackend().render_kernels([f]).code
    assert backend.render_kernels([f]).code == "/* sim runtime */" + base.removeprefix(
        CBackend.runtime_header.read_text())
