"""The packed x86 dense path end to end: mat_mul/gemm with constant weights built by kiln.build
(pack-dense, the dense_packed compute, the register-tiled schedule, loop partition of the ragged
tiles, gcc) against the interpreter on the original graph, over odd shapes, batch dims, fused
epilogues and the schedule's knobs."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

import kiln
import kiln.topi.schedule_dense as schedule_dense
import kiln.topi.schedule_dispatch as dispatch
from kiln.compiler.fuse import fuse
from kiln.compiler.lower import lower_groups
from kiln.ir import Constant, Function, IRModule, SizeVar, TensorType, Var
from kiln.op import get_op
from kiln.target import Target
from kiln.topi.knobs import KnobSpace, applying

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")
F32 = "float32"
rng = np.random.default_rng(1)


@pytest.fixture(autouse=True)
def fresh_caches(tmp_path, monkeypatch):
    """Lower every group afresh: a kernel-cache hit would skip the schedule (and the knobs) under test."""
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))


@pytest.fixture
def claimed(monkeypatch):
    """Names of the anchor schedules that returned a schedule during the test."""
    names: list[str] = []
    for op, fn in list(dispatch.ANCHOR_SCHEDULES["c"].items()):
        def f(outputs, target, fn=fn):
            s = fn(outputs, target)
            if s is not None:
                names.append(fn.__name__)
            return s
        monkeypatch.setitem(dispatch.ANCHOR_SCHEDULES["c"], op, f)
    return names


def _w(*shape) -> Constant:
    return Constant(rng.standard_normal(shape).astype(np.float32))


def _check(params, body, feeds, config=None, rtol=1e-4) -> kiln.CompiledModel:
    mod = IRModule({"main": Function(tuple(params), body)})
    with applying(config or {}):
        model = kiln.build(mod)
    assert not model.host_groups
    want = kiln.evaluate(mod, feeds)
    for g, w in zip(model.run(feeds), want):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * 10)
    return model


@pytest.mark.parametrize("m, k, n", [
    (1, 1, 1), (1, 784, 1024), (8, 1024, 10), (13, 64, 40), (7, 3, 97), (6, 17, 32), (31, 29, 65), (2, 5, 3),
])
def test_gemm_trans_b_bias_relu(claimed, m, k, n):
    a = Var("a", TensorType((m, k), F32))
    y = get_op("nn.relu")(get_op("linalg.gemm")(a, _w(n, k), _w(n), transB=1))
    _check([a], y, {"a": rng.standard_normal((m, k)).astype(np.float32)})
    assert claimed == ["schedule_dense_packed"]


@pytest.mark.parametrize("ashape, n", [((2, 5, 17), 33), ((3, 1, 2, 8), 5), ((4, 100), 70)])
def test_mat_mul_with_batch_dims_and_residual_add(claimed, ashape, n):
    a = Var("a", TensorType(ashape, F32))
    r = Var("r", TensorType(ashape[:-1] + (n,), F32))
    y = get_op("math.add")(get_op("linalg.mat_mul")(a, _w(ashape[-1], n)), r)
    _check([a, r], y, {"a": rng.standard_normal(ashape).astype(np.float32),
                       "r": rng.standard_normal(ashape[:-1] + (n,)).astype(np.float32)})
    assert claimed == ["schedule_dense_packed"]


def test_gemv_with_several_panels_per_tile():
    a = Var("a", TensorType((1, 300), F32))
    y = get_op("nn.relu")(get_op("linalg.gemm")(a, _w(130, 300), _w(130), transB=1))
    _check([a], y, {"a": rng.standard_normal((1, 300)).astype(np.float32)}, {"dense.panels": 2})


@pytest.mark.parametrize("rows", [1, 2, 3, 4])
def test_few_rows_tile_two_panels(rows):
    """A product of up to 3 rows (a batch-1 MLP) tiles several panels of B by default, not one: one panel
    leaves a row 2 FMA chains (latency-bound). One row tiles four (8 accumulators), 2-3 rows two; 4 rows keep
    one panel (2 x 4 x 2 vectors would not fit)."""
    from kiln.topi.schedule_dense import default_panels

    a = Var("a", TensorType((rows, 300), F32))
    space = KnobSpace()
    mod = IRModule({"main": Function((a,), get_op("nn.relu")(get_op("linalg.gemm")(a, _w(130, 300), _w(130), transB=1)))})
    with applying({}, space):
        lower_groups(fuse(mod))
    host = Target.host()
    assert space.knobs["dense.panels"][1] == default_panels(host, rows)
    assert default_panels(host, rows) == ({1: 4, 2: 2, 3: 2}.get(rows, default_panels(host))
                                          if default_panels(host) == 1 else default_panels(host))
    _check([a], mod.main.body, {"a": rng.standard_normal((rows, 300)).astype(np.float32)})


def test_gemm_alpha_beta_and_full_c():
    a = Var("a", TensorType((11, 23), F32))
    y = get_op("linalg.gemm")(a, _w(23, 19), _w(11, 19), alpha=0.5, beta=-2.0)
    _check([a], y, {"a": rng.standard_normal((11, 23)).astype(np.float32)})


def test_symbolic_rows():
    a = Var("a", TensorType((SizeVar("n"), 37), F32))
    y = get_op("nn.relu")(get_op("linalg.mat_mul")(a, _w(37, 50)))
    mod = IRModule({"main": Function((a,), y)})
    model = kiln.build(mod)
    for n in (1, 6, 7, 20):
        x = rng.standard_normal((n, 37)).astype(np.float32)
        np.testing.assert_allclose(model.run({"a": x})[0], kiln.evaluate(mod, {"a": x})[0], rtol=1e-4, atol=1e-3)


def test_float64():
    a = Var("a", TensorType((9, 14), "float64"))
    y = get_op("linalg.mat_mul")(a, Constant(rng.standard_normal((14, 21))))
    _check([a], y, {"a": rng.standard_normal((9, 14))}, rtol=1e-10)


@pytest.mark.parametrize("config", [
    {"dense.mr": 1}, {"dense.mr": 4}, {"dense.mr": 12}, {"dense.order": "nm"}, {"dense.mr": 3, "dense.order": "nm"},
    {"dense.panels": 2}, {"dense.panels": 4, "dense.mr": 1}, {"dense.nc": 1}, {"dense.nc": 2}, {"dense.nc": 2, "dense.mr": 4},
])
def test_knobs_change_the_tiling_not_the_result(config):
    a = Var("a", TensorType((29, 40), F32))
    y = get_op("nn.relu")(get_op("linalg.gemm")(a, _w(70, 40), _w(70), transB=1))
    _check([a], y, {"a": rng.standard_normal((29, 40)).astype(np.float32)}, config)


def test_schedule_asks_for_its_knobs():
    a = Var("a", TensorType((512, 32), F32))
    mod = IRModule({"main": Function((a,), get_op("linalg.mat_mul")(a, _w(32, 48)))})
    space = KnobSpace()
    with applying({}, space):
        lower_groups(fuse(mod))
    assert {"dense.mr", "dense.order", "dense.panels", "dense.nc"} <= set(space.knobs)


def test_large_products_block_the_columns_of_b():
    """K x N too big for L2 and many rows: the column blocks of B go outermost, the row tiles (parallel) inside."""
    a = Var("a", TensorType((600, 1024), F32))
    src = _kernel_source(IRModule({"main": Function((a,), get_op("linalg.mat_mul")(a, _w(1024, 512)))}))
    assert src.index("for (int64_t i1_outer_outer") < src.index("#pragma omp parallel for")


def _kernel_source(mod: IRModule, config: dict | None = None) -> str:
    from kiln.codegen.c_source import generate

    with applying(config or {}):
        kernels, _, host = lower_groups(fuse(mod))
    assert not host
    return generate([k.func for k in kernels]).code


def test_small_products_run_on_one_thread_large_ones_in_parallel():
    small = Var("a", TensorType((1, 64), F32))
    large = Var("a", TensorType((64, 256), F32))
    src_small = _kernel_source(IRModule({"main": Function((small,), get_op("linalg.mat_mul")(small, _w(64, 32)))}))
    src_large = _kernel_source(IRModule({"main": Function((large,), get_op("linalg.mat_mul")(large, _w(256, 256)))}))
    assert "omp parallel" not in src_small
    assert "omp parallel" in src_large


def test_ragged_tiles_are_peeled_off_a_constant_register_tile():
    """Loop partition leaves the main tiles' accumulation loops with constant extents (no min())."""
    a = Var("a", TensorType((13, 64), F32))
    src = _kernel_source(IRModule({"main": Function((a,), get_op("linalg.mat_mul")(a, _w(64, 40)))}))
    assert "kiln_min_i64" not in src


@pytest.mark.parametrize("ashape, bshape", [
    ((12, 13, 16), (12, 16, 40)),  # batched, ragged rows and columns
    ((2, 1, 7, 6), (3, 6, 33)),  # broadcast batch dims
    ((1, 97, 31), (1, 31, 65)),
    ((5, 3), (3, 129)),
    ((8, 1, 5), (8, 5, 1)),
])
def test_mat_mul_of_two_inputs_uses_register_tiles(claimed, ashape, bshape):
    a, b = Var("a", TensorType(ashape, F32)), Var("b", TensorType(bshape, F32))
    y = get_op("nn.relu")(get_op("linalg.mat_mul")(a, b))
    _check([a, b], y, {"a": rng.standard_normal(ashape).astype(np.float32),
                       "b": rng.standard_normal(bshape).astype(np.float32)})
    assert claimed == ["schedule_dense"]


def test_integer_mat_mul_of_two_inputs():
    a, b = Var("a", TensorType((3, 9, 14), "int32")), Var("b", TensorType((3, 14, 20), "int32"))
    feeds = {"a": rng.integers(-50, 50, (3, 9, 14)).astype(np.int32), "b": rng.integers(-50, 50, (3, 14, 20)).astype(np.int32)}
    _check([a, b], get_op("linalg.mat_mul")(a, b), feeds)


def test_gemm_with_an_input_b_read_across_rows():
    """transB on a B that is not a constant: not packed, k stays the contiguous (unrolled chains) axis."""
    a, b = Var("a", TensorType((10, 33), F32)), Var("b", TensorType((17, 33), F32))
    _check([a, b], get_op("linalg.gemm")(a, b, transB=1), {"a": rng.standard_normal((10, 33)).astype(np.float32),
                                                           "b": rng.standard_normal((17, 33)).astype(np.float32)})


def test_batched_product_runs_its_batch_in_parallel():
    a, b = Var("a", TensorType((12, 64, 32), F32)), Var("b", TensorType((12, 32, 64), F32))
    src = _kernel_source(IRModule({"main": Function((a, b), get_op("linalg.mat_mul")(a, b))}))
    assert "omp parallel" in src and "kiln_min_i64" not in src


@pytest.mark.parametrize("nr", [8, 16, 24])
def test_other_panel_widths_avx2_sized(nr):
    """The panel width an AVX2 host gets (16 floats), and widths that are not a vector multiple."""
    from kiln.compiler.lower import build_graph_executor as build
    from kiln.transform import PassContext

    a = Var("a", TensorType((14, 50), F32))
    mod = IRModule({"main": Function((a,), get_op("nn.relu")(get_op("linalg.gemm")(a, _w(45, 50), _w(45), transB=1)))})
    cm = build(mod, 2, PassContext(opt_level=2, config={"pack_dense.nr": nr}))
    assert not cm.host_groups
    from kiln.ir.expr import Call
    from kiln.ir.visitor import post_order
    widths = {e.args[1].type.shape[2] for f in cm.mod.functions.values() for e in post_order(f)
              if isinstance(e, Call) and getattr(e.op, "name", "") == "linalg.dense_packed"}
    assert widths == {nr}
    x = rng.standard_normal((14, 50)).astype(np.float32)
    np.testing.assert_allclose(cm.run({"a": x})[0], kiln.evaluate(mod, {"a": x})[0], rtol=1e-4, atol=1e-4)


def test_many_column_blocks_share_one_parallel_team():
    a = Var("a", TensorType((512, 1024), F32))
    src = _kernel_source(IRModule({"main": Function((a,), get_op("linalg.mat_mul")(a, _w(1024, 1024)))}))
    assert src.index("#pragma omp parallel for") < src.index("for (int64_t i1_outer_outer")
    assert src.count("#pragma omp parallel for") == 1


def test_few_rows_put_the_panels_outermost_in_one_team():
    """A transformer's 128 tokens: one parallel loop over the panels of B, the row tiles inside it."""
    a = Var("a", TensorType((1, 128, 384), F32))
    src = _kernel_source(IRModule({"main": Function((a,), get_op("linalg.mat_mul")(a, _w(384, 1152)))}))
    assert src.count("#pragma omp parallel for") == 1
    assert src.index("#pragma omp parallel for") < src.index("for (int64_t i1_outer")


def _loop_extent(src: str, var: str) -> int:
    """The constant trip count of the loop over `var` in a kernel's C."""
    return int(re.search(rf"for \(int64_t {var} = 0LL; {var} < (\d+)LL", src).group(1))


def test_few_rows_with_a_long_k_keep_the_row_tiles_outermost():
    """BERT's FFN-down (128 x 1536 A: 768 KB) would stream A from L3 once per panel: inside a column block
    the row tiles stay outside the block's panels (AVX2: blocks of 3 panels; AVX-512's 12 wider panels:
    blocks of one, no panel loop left)."""
    a = Var("a", TensorType((1, 128, 1536), F32))
    src = _kernel_source(IRModule({"main": Function((a,), get_op("linalg.mat_mul")(a, _w(1536, 384)))}),
                         {"dense.panels": 1})
    rows = src.index("for (int64_t i1_outer")
    assert src.index("for (int64_t i2_outer_outer") < rows
    assert "for (int64_t i2_outer_inner" not in src[:rows]  # panels inside row tiles


@pytest.mark.parametrize("rows", [128, 131])
def test_few_rows_share_one_team_over_smaller_column_blocks(rows):
    """FFN-down's panels would be 5 L2-sized blocks on AVX2 (6 on AVX-512), each a parallel team of its own
    over 22 row tiles: with few rows they become at least PARALLEL_MIN_BLOCKS blocks under one parallel
    loop, and still compute the product."""
    a = Var("a", TensorType((1, rows, 1536), F32))
    mod = IRModule({"main": Function((a,), get_op("linalg.mat_mul")(a, _w(1536, 384)))})
    src = _kernel_source(mod, {"dense.panels": 1})
    assert src.count("#pragma omp parallel for") == 1
    assert src.index("#pragma omp parallel for") < src.index("for (int64_t i2_outer_outer") < src.index("for (int64_t i1_outer")
    assert _loop_extent(src, "i2_outer_outer") >= schedule_dense.PARALLEL_MIN_BLOCKS
    _check([a], mod.main.body, {"a": rng.standard_normal((1, rows, 1536)).astype(np.float32)}, {"dense.panels": 1})


@pytest.mark.parametrize("rows", [1, 7, 128, 131, 257])
def test_row_tiles_of_every_default_size_match_the_interpreter(rows):
    """The default row tile (6, or 8 with AVX-512) over exact and ragged row counts, panel- and row-major."""
    a = Var("a", TensorType((rows, 96), F32))
    _check([a], get_op("linalg.mat_mul")(a, _w(96, 80)), {"a": rng.standard_normal((rows, 96)).astype(np.float32)})


@pytest.mark.parametrize("ashape", [(197, 1, 64), (29, 1, 1, 24), (1, 23, 1, 16)])
def test_rows_skip_unit_axes(claimed, ashape):
    """Sequence-first activations [S, 1, K] tile their S rows: the 6-8 row register tile, not 1 row."""
    a = Var("a", TensorType(ashape, F32))
    mod = IRModule({"main": Function((a,), get_op("linalg.mat_mul")(a, _w(ashape[-1], 40)))})
    _check([a], mod.main.body, {"a": rng.standard_normal(ashape).astype(np.float32)})
    from kiln.topi.schedule_dense import default_panels, tile_rows

    r = max(k for k, n in enumerate(ashape[:-1]) if n != 1)
    host = Target.host()
    assert f"i{r}_outer < {ashape[r] // tile_rows(default_panels(host), host)}LL" in _kernel_source(mod)  # row tiles over the S axis
    assert claimed[-1] == "schedule_dense_packed"
