"""Golden and differential tests of the bookkeeping passes, CSE, normal forms and the infra."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.errors import WellFormednessError
from kiln.ir import Function, IRModule, TensorType, Var
from kiln.op import get_op
from kiln.transform import PASSES, PassContext, PassTiming, PrintIR, Sequential, WellFormedCheck, module_pass
from tests.transform.golden import assert_golden, run_pass

T = "Tensor[(2, 3), float32]"


def test_cse_merges_identical_calls_and_constants():
    assert_golden(PASSES["eliminate-common-subexpr"], f"""
def @main(%x: {T}) -> {T} {{
  %0 = nn.relu(%x);
  %1 = nn.relu(%x);
  %2 = math.add(%0, [1.0]:float32(1,));
  %3 = math.add(%1, [1.0]:float32(1,));
  math.mul(%2, %3)
}}""", f"""
def @main(%x: {T}) -> {T} {{
  %0 = nn.relu(%x);
  %1 = math.add(%0, [1.0]:float32(1,));
  math.mul(%1, %1)
}}""")


def test_cse_keeps_different_attrs_apart():
    src = f"""
def @main(%x: {T}) -> {T} {{
  %0 = nn.leaky_relu(%x, alpha=0.1);
  %1 = nn.leaky_relu(%x, alpha=0.2);
  math.add(%0, %1)
}}"""
    assert_golden(PASSES["eliminate-common-subexpr"], src, src)


def test_dead_code_elimination_drops_unused_lets():
    assert_golden(PASSES["dead-code-elimination"], f"""
def @main(%x: {T}) -> {T} {{
  let %a: {T} = nn.relu(%x);
  let %b: {T} = math.exp(%a);
  let %c: {T} = math.neg(%x);
  %c
}}""", f"""
def @main(%x: {T}) -> {T} {{
  let %c: {T} = math.neg(%x);
  %c
}}""")


def test_remove_unused_functions():
    assert_golden(PASSES["remove-unused-functions"], f"""
def @main(%x: {T}) -> {T} {{
  @used(%x)
}}

def @used(%y: {T}) -> {T} {{
  nn.relu(%y)
}}

def @unused(%y: {T}) -> {T} {{
  math.neg(%y)
}}""", f"""
def @main(%x: {T}) -> {T} {{
  @used(%x)
}}

def @used(%y: {T}) -> {T} {{
  nn.relu(%y)
}}""")


def test_anf_and_back_to_graph_form():
    src = f"""
def @main(%x: {T}) -> {T} {{
  %0 = nn.relu(%x);
  %1 = math.exp(%0);
  math.add(%0, %1)
}}"""
    anf = assert_golden(PASSES["to-a-normal-form"], src, f"""
def @main(%x: {T}) -> {T} {{
  let %a: {T} = nn.relu(%x);
  let %b: {T} = math.exp(%a);
  let %c: {T} = math.add(%a, %b);
  %c
}}""")
    back = run_pass(PASSES["to-graph-normal-form"], anf)
    assert kiln.ir.structural_equal(back, kiln.ir.parse(src))


def test_anf_binds_branch_work_inside_branches():
    src = f"""
def @main(%c: Tensor[(), bool], %x: {T}) -> {T} {{
  %0 = nn.relu(%x);
  if (%c) {{
    math.exp(%0)
  }} else {{
    math.neg(%x)
  }}
}}"""
    out = run_pass(PASSES["to-a-normal-form"], kiln.ir.parse(src))
    text = kiln.ir.text(out)
    assert "let" in text
    x = np.array([[-1, 0, 1], [2, -3, 4]], np.float32)
    for c in (True, False):
        a = kiln.evaluate(kiln.ir.parse(src), {"c": np.array(c), "x": x})
        b = kiln.evaluate(out, {"c": np.array(c), "x": x})
        np.testing.assert_allclose(a[0], b[0])


def test_inline_functions_marked_inline():
    mod = kiln.ir.parse(f"""
def @main(%x: {T}) -> {T} {{
  %0 = @f(%x);
  @f(%0)
}}

def @f(%y: {T}, Inline=1) -> {T} {{
  nn.relu(%y)
}}""")
    out = run_pass(PASSES["inline"], mod)
    assert kiln.ir.structural_equal(out, kiln.ir.parse(f"""
def @main(%x: {T}) -> {T} {{
  %0 = nn.relu(%x);
  nn.relu(%0)
}}"""))


def test_infer_type_refreshes_types_after_retyping_a_param():
    relu = get_op("nn.relu")
    x = Var("x", TensorType((2, 3), "float32"))
    mod = IRModule({"main": Function((x,), relu(x))})
    out = run_pass(PASSES["infer-type"], mod)
    assert kiln.ir.structural_equal(out, mod) and out.main.body is not mod.main.body


def test_pass_context_levels_required_disabled():
    cse = PASSES["eliminate-common-subexpr"]  # opt_level 2
    mod = kiln.ir.parse(f"def @main(%x: {T}) -> {T} {{ %0 = nn.relu(%x); %1 = nn.relu(%x); math.add(%0, %1) }}")
    assert cse(mod, PassContext(opt_level=1)) is mod
    assert cse(mod, PassContext(opt_level=1, required=["eliminate-common-subexpr"])) is not mod
    assert cse(mod, PassContext(opt_level=3, disabled=["eliminate-common-subexpr"])) is mod


def test_timing_and_print_ir_instruments():
    dumps: list[str] = []
    timing = PassTiming()
    seq = Sequential((PASSES["eliminate-common-subexpr"], PASSES["dead-code-elimination"]))
    mod = kiln.ir.parse(f"def @main(%x: {T}) -> {T} {{ %0 = nn.relu(%x); %1 = nn.relu(%x); math.add(%0, %1) }}")
    with PassContext(opt_level=3, instruments=[timing, PrintIR(passes=("eliminate-common-subexpr",),
                                                               before_pass=True, out=dumps.append)]):
        seq(mod)
    assert [n for n, _ in timing.times] == ["eliminate-common-subexpr", "dead-code-elimination"]
    assert "eliminate-common-subexpr" in timing.table() and "total" in timing.table()
    assert len(dumps) == 2 and dumps[0].startswith("// IR before") and dumps[1].startswith("// IR after")


def test_well_formed_check_names_the_breaking_pass():
    @module_pass("test-break-ir", opt_level=0)
    def break_ir(mod, ctx):
        stray = Var("stray", TensorType((2, 3), "float32"))
        return IRModule({"main": Function(mod.main.params, get_op("math.add")(mod.main.params[0], stray))})

    try:
        mod = kiln.ir.parse(f"def @main(%x: {T}) -> {T} {{ nn.relu(%x) }}")
        with pytest.raises(WellFormednessError, match="test-break-ir"):
            with PassContext(instruments=[WellFormedCheck()]) as ctx:
                break_ir(mod, ctx)
    finally:
        PASSES.pop("test-break-ir")


def test_ten_thousand_node_chain_through_every_pass():
    relu, add = get_op("nn.relu"), get_op("math.add")
    x = Var("x", TensorType((3,), "float32"))
    e = x
    for _ in range(10_000):
        e = add(relu(e), x)
    mod = IRModule({"main": Function((x,), e)})
    feeds = {"x": np.array([1, 2, 3], np.float32) * 1e-4}
    want = kiln.evaluate(mod, feeds)[0]
    for name in ("eliminate-common-subexpr", "dead-code-elimination", "fold-constant", "to-a-normal-form",
                 "fuse-ops", "infer-type"):
        out = run_pass(PASSES[name], mod)
        np.testing.assert_allclose(kiln.evaluate(out, feeds)[0], want, rtol=1e-5)
