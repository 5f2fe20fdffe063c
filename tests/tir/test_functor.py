"""Traversal helpers: substitution respects binders, rewrites keep sharing."""

from __future__ import annotations

from kiln.tir import expr as E
from kiln.tir.functor import free_vars, instances, map_expr, substitute, walk
from kiln.tir.stmt import For
from tests.tir import nests


def test_substitute_expr_and_stmt():
    i, j = E.Var("i"), E.Var("j")
    assert substitute(i * 4 + j, {j: E.IntImm(1)}) == i * 4 + E.IntImm(1)
    f = nests.copy2d()
    outer = f.body
    body = substitute(outer.body, {outer.loop_var: E.IntImm(3)})
    assert outer.loop_var not in free_vars(body)
    assert body.loop_var is outer.body.loop_var  # binders are not children


def test_map_expr_unchanged_is_identity_and_shared_once():
    i = E.Var("i")
    shared = i * 2
    e = shared + shared
    assert map_expr(e, lambda x: None) is e
    calls = []
    map_expr(e, lambda x: calls.append(x) if isinstance(x, E.Mul) else None)
    assert len(calls) == 1


def test_walk_reaches_everything():
    f = nests.matmul()
    names = {x.name for x in walk(f.body) if isinstance(x, E.Var)}
    assert names == {"i", "j", "ko", "ki"}


def test_map_expr_pre_answers_for_a_node_before_its_children():
    i, j = E.Var("i"), E.Var("j")
    e = E.select(E.IntImm(1, "bool"), i + 1, j * 2)
    seen = []

    def pre(x, go):
        return go(x.t) if isinstance(x, E.Select) else None

    assert map_expr(e, lambda x: seen.append(x) or None, pre) == i + 1
    assert all(j not in free_vars(x) for x in seen)  # the branch pre skipped is never mapped


def test_instances_equal_one_substitute_per_value_and_share_what_does_not_use_the_var():
    loop_ki = next(x for x in walk(nests.matmul().body) if isinstance(x, For) and x.loop_var.name == "ki")
    values = [E.IntImm(k) for k in range(4)]
    copies = instances(loop_ki.body, loop_ki.loop_var, values)
    assert [str(c) for c in copies] == [str(substitute(loop_ki.body, {loop_ki.loop_var: v})) for v in values]
    c_load = copies[0].body.value.a  # C[i, j]: no ki in it, so every copy holds the same object
    assert all(c.body.value.a is c_load for c in copies)
    assert copies[0].body.value.b is not copies[1].body.value.b
