"""hoist_conditions: a run of statements whose branches repeat a condition (a depthwise conv's padded
rows, unrolled) becomes one branch over copies of the run with the condition decided; conjunctions
lose the decided part; a condition that reads a buffer, or one tested only once, stays; at most
MAX_CONDITIONS are hoisted per run, and none where the copies would pass MAX_NODES; meaning is kept
(tir evaluator)."""

from __future__ import annotations

import numpy as np
import pytest

from kiln import tir
from kiln.tir import BufferStore, IfThenElse, PrimFunc, SeqStmt, Var
from kiln.tir.functor import walk
from kiln.tir.transform import hoist_conditions, lower_passes, simplify
from kiln.tir.transform.hoist_conditions import MAX_CONDITIONS
from tests.tir.nests import P, buf, loop
from tests.tir.test_passes import same_meaning


def _ifs(node) -> list[IfThenElse]:
    return [x for x in walk(node.body if isinstance(node, PrimFunc) else node) if isinstance(x, IfThenElse)]


def padded_rows(rows: int = 6) -> PrimFunc:
    """out[y, k] += a[y + k - 1] for taps k = 0..2 and four columns, each tap under the row's bounds
    test (an inlined zero pad after unroll): the same two conditions in every tap of the run."""
    a, out = buf("a", rows, 4), buf("out", rows, 4)
    y = Var("y")
    stmts = []
    for k in range(3):
        r = y + (k - 1)
        cond = tir.all_of([r >= 0, r < rows]) if k != 1 else None
        for col in range(4):
            store = BufferStore(out, out[y, col] + a[tir.max_(tir.min_(r, tir.const(rows - 1)), tir.const(0)), col],
                                (y, tir.const(col)))
            stmts.append(IfThenElse(cond, store) if cond is not None else store)
    return PrimFunc("padded_rows", (a, out), loop(y, rows, SeqStmt(tuple(stmts)), P))


def test_repeated_row_conditions_leave_the_run():
    f = padded_rows()
    g = hoist_conditions(f)
    same_meaning(f, g)
    loop_body = g.body.body
    assert isinstance(loop_body, IfThenElse)  # the run is one branch over its copies
    inner = [s for s in walk(loop_body) if isinstance(s, SeqStmt)]
    assert inner and all(not any(isinstance(x, IfThenElse) for x in s.stmts) for s in inner
                         if all(isinstance(x, BufferStore) for x in s.stmts))
    same_meaning(f, lower_passes(f))


def test_every_copy_is_branch_free_after_simplify():
    """After simplify, every run of stores is one basic block: the conditions (two per tested tap row,
    four in all) are all outside the runs."""
    f = padded_rows()
    g = simplify(hoist_conditions(f))
    same_meaning(f, g)
    runs = [s for s in walk(g.body) if isinstance(s, SeqStmt) and any(isinstance(x, BufferStore) for x in s.stmts)]
    assert runs and all(not any(isinstance(x, IfThenElse) for x in r.stmts) for r in runs)
    assert 0 < len(_ifs(g)) <= 2 ** MAX_CONDITIONS - 1


def test_a_condition_tested_once_or_reading_a_buffer_stays():
    a, m, out = buf("a", 4), buf("m", 4), buf("out", 4)
    y = Var("y")
    once = IfThenElse(y < 2, BufferStore(out, a[y], (y,)))
    loads = [IfThenElse(m[y] > 0.0, BufferStore(out, out[y] + a[y], (y,))) for _ in range(4)]
    f = PrimFunc("f", (a, m, out), loop(y, 4, SeqStmt((once, *loads)), P))
    g = hoist_conditions(f)
    assert g.body.body == f.body.body
    assert g is f  # nothing hoisted: the same function, so the pipeline skips its next simplify
    same_meaning(f, g)


@pytest.mark.parametrize("n", [1, 3, 5])
def test_at_most_max_conditions_per_run(n):
    """n independent conditions, each tested twice: at most MAX_CONDITIONS leave the run."""
    a, out = buf("a", 8), buf("out", 8)
    y = Var("y")
    stmts = [IfThenElse(y > i, BufferStore(out, out[y] + a[y] * float(i + 1), (y,))) for i in range(n) for _ in range(2)]
    f = PrimFunc("f", (a, out), loop(y, 8, SeqStmt(tuple(stmts)), P))
    g = hoist_conditions(f)
    same_meaning(f, g)
    hoisted = min(n, MAX_CONDITIONS)
    depth, node = 0, g.body.body
    while isinstance(node, IfThenElse):
        depth, node = depth + 1, node.then_case
    assert depth == hoisted
    assert len(_ifs(g)) == 2 ** hoisted - 1 + 2 ** hoisted * 2 * (n - hoisted)


def test_padded_depthwise_conv_tiles_are_branch_free_inside():
    """End to end: a depthwise 3x3 conv with zero padding (inlined, no padded copy) compiles to tiles
    whose row tests are outside the taps, and matches numpy."""
    from onnx import TensorProto, helper, numpy_helper

    import kiln

    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 1, 3, 3)).astype(np.float32)
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], group=16, pads=[1, 1, 1, 1])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 9, 11])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 9, 11])],
                          [numpy_helper.from_array(w, "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    compiled = kiln.build(model, executor="aot")
    x = rng.standard_normal((1, 16, 9, 11)).astype(np.float32)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = sum(xp[:, :, i:i + 9, j:j + 11] * w[None, :, 0, i, j, None, None] for i in range(3) for j in range(3))
    np.testing.assert_allclose(compiled.run({"x": x})[0], want, rtol=1e-5, atol=1e-5)
    code = compiled.runner.library.source.code
    body = code[code.index("kiln:unit"):]
    taps = body.count("#pragma omp simd")
    assert body.count("if (") * 8 < taps  # the row tests: a few per tile, not one per tap


def test_a_run_whose_copies_would_pass_max_nodes_stays(monkeypatch):
    import sys

    monkeypatch.setattr(sys.modules["kiln.tir.transform.hoist_conditions"], "MAX_NODES", 50)
    f = padded_rows()
    assert hoist_conditions(f).body.body == f.body.body


def test_a_tie_hoists_the_condition_that_comes_first_whatever_the_vars_addresses():
    """Two conditions tested equally often: the one the run tests first is hoisted. Before, the count
    came from a set, whose order follows the hashes of the Vars inside (addresses): another process
    could hoist the other one and render other C for the same model."""
    a, out = buf("a", 8), buf("out", 8)
    for _ in range(8):  # fresh Vars each time: other addresses, other hashes
        y, z = Var("y"), Var("z")
        first, second = y < 4, z < 4
        stmts = tuple(IfThenElse(tir.all_of([first, second]), BufferStore(out, a[k], (tir.const(k),)))
                      for k in range(2))
        f = PrimFunc("tie", (a, out), loop(y, 8, loop(z, 8, SeqStmt(stmts))))
        assert hoist_conditions(f).body.body.body.cond == first
