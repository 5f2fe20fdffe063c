"""Models on the simulated accelerator against the reference interpreter: the benchmark CNNs, random
CNN graphs whose layers all map onto it, random graphs of anything (the rest falls back to the CPU),
placement by rule, and the report `kiln run/bench --target npu-sim` prints."""

import numpy as np
import onnx
import pytest

import kiln
from kiln.cli import main
from kiln.errors import ArtifactError, KilnError
from kiln.ir import Constant, Function, IRModule, TupleGetItem, Var
from kiln.ir.types import TensorType
from kiln.models import mobilenet_v2, resnet18, small_cnn
from kiln.npu.run_report import run_report
from kiln.op import get_op
from tests.random_graphs import random_module


def _feeds(mod, seed=0):
    rng = np.random.default_rng(seed)
    return {p.name: rng.standard_normal(p.type.shape).astype(np.float32) for p in mod.main.params}


def _check(mod, feeds, atol=1e-4):
    built = kiln.build(mod, "npu-sim")
    outs = built.run(feeds)
    for got, want in zip(outs, kiln.evaluate(mod, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=atol)
    return built


def test_a_session_on_npu_sim_runs_small_cnn_like_the_interpreter():
    mod = kiln.from_onnx(small_cnn(batch=2))
    feeds = _feeds(mod)
    sess = kiln.InferenceSession(small_cnn(batch=2), target="npu-sim")
    np.testing.assert_allclose(sess.run(None, feeds)[0], kiln.evaluate(mod, feeds)[0], rtol=1e-4, atol=1e-6)
    assert sess.model.executor == "npu" and sess.model.target.kind == "npu-sim"
    cost = sess.model.runner.last_run
    assert len(cost.kernels) == sess.model.report.kernels and cost.total().cycles > 0


@pytest.mark.parametrize("builder", [resnet18, mobilenet_v2], ids=["resnet18", "mobilenet_v2"])
def test_the_benchmark_cnns_at_a_small_size(builder):
    mod = kiln.from_onnx(builder(batch=1, size=32))
    built = _check(mod, _feeds(mod))
    assert built.runner.last_run.cpu_steps <= 2  # flatten (and nothing else heavy) on the CPU


@pytest.mark.slow
@pytest.mark.parametrize("builder", [resnet18, mobilenet_v2], ids=["resnet18", "mobilenet_v2"])
def test_the_benchmark_cnns_at_224(builder):
    mod = kiln.from_onnx(builder(batch=1, size=224))
    _check(mod, _feeds(mod))


def _random_cnn(seed: int) -> IRModule:
    """Convolutions (plain, strided, depthwise) with random epilogues and residuals, pools, a dense head."""
    rng = np.random.default_rng(seed)
    c, h = int(rng.integers(1, 20)), int(rng.integers(6, 14))
    x = Var("x", TensorType((int(rng.integers(1, 3)), c, h, h), "float32"))
    y, keep = x, []
    for _ in range(int(rng.integers(2, 6))):
        k, kind = int(rng.choice([1, 3])), rng.random()
        cin = y.type.shape[1]
        if kind < 0.2:
            y = TupleGetItem(get_op("nn.max_pool")(y, kernel_shape=(3, 3), pads=(1, 1, 1, 1), strides=(2, 2)), 0)
            continue
        depthwise = kind < 0.4
        cout = cin if depthwise else int(rng.integers(1, 40))
        w = Constant(rng.standard_normal((cout, 1 if depthwise else cin, k, k)).astype(np.float32) * 0.3)
        y = get_op("nn.conv")(y, w, group=cin if depthwise else 1, pads=(k // 2,) * 4,
                              strides=(int(rng.integers(1, 3)),) * 2)
        if rng.random() < 0.6:
            y = get_op("math.mul")(y, Constant(rng.random((cout, 1, 1)).astype(np.float32) + 0.5))
            y = get_op("math.add")(y, Constant(rng.standard_normal((cout, 1, 1)).astype(np.float32)))
        same = [t for t in keep if t.type == y.type]
        if same and rng.random() < 0.7:
            y = get_op("math.add")(y, same[-1])
        y = get_op("nn.relu")(y) if rng.random() < 0.5 else get_op("math.clip")(
            y, Constant(np.float32(-1)), Constant(np.float32(2)))
        keep.append(y)
    y = get_op("tensor.flatten")(get_op("nn.global_average_pool")(y), axis=1)
    w = Constant(rng.standard_normal((5, y.type.shape[1])).astype(np.float32))
    y = get_op("linalg.gemm")(y, w, Constant(np.arange(5, dtype=np.float32)), transB=1)
    return IRModule({"main": Function((x,), y)})


@pytest.mark.parametrize("seed", range(6))
def test_random_cnn_graphs_run_on_the_accelerator(seed):
    mod = _random_cnn(seed)
    built = _check(mod, _feeds(mod, seed))
    assert built.runner.last_run.cpu_steps == 1  # the flatten


@pytest.mark.parametrize("seed", range(6))
def test_random_graphs_fall_back_to_the_cpu_where_needed(seed):
    mod, feeds = random_module(seed)
    _check(mod, feeds)


def test_an_operator_the_accelerator_cannot_run_stays_on_the_cpu_with_its_transfers_counted():
    x = Var("x", TensorType((1, 16, 8, 8), "float32"))
    w = Constant(np.ones((16, 16, 3, 3), np.float32))
    first = get_op("nn.conv")(x, w, pads=(1, 1, 1, 1))
    dilated = get_op("nn.conv")(first, w, pads=(2, 2, 2, 2), dilations=(2, 2))  # not on the accelerator
    mod = IRModule({"main": Function((x,), get_op("nn.conv")(dilated, w, pads=(1, 1, 1, 1)))})
    built = _check(mod, _feeds(mod), atol=1e-2)
    cost = built.runner.last_run
    assert (len(cost.kernels), cost.cpu_steps) == (2, 1)
    assert cost.transfers == 4  # x in, first out, dilated in, the result out
    assert cost.transfer_bytes == 4 * 16 * 8 * 8 * 4


def test_the_report_names_each_kernel_and_each_optimization():
    built = kiln.build(small_cnn(batch=1), "npu-sim")
    built.run(_feeds(built.mod))
    text = "\n".join(run_report(built, 0.5))
    for word in ("npu0_conv", "bound", "conflicts", "transfers", "instructions/s", "no double buffering",
                 "no conflict-free layout", "simple tiling", "no on-chip scheduling", "no column packing", "DMA bytes"):
        assert word in text


def test_kiln_run_and_bench_on_npu_sim_print_the_report(tmp_path, capsys):
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(batch=1), path)
    assert main(["run", str(path), "--target", "npu-sim"]) == 0
    out = capsys.readouterr().out
    assert "probs: shape=(1, 10)" in out and "matrix unit on compute-bound layers" in out
    assert main(["bench", str(path), "--target", "npu-sim", "--runs", "1"]) == 0
    assert "max |diff| vs interpreter" in capsys.readouterr().out
    assert main(["bench", str(path), "--target", "c"]) != 0
    assert "takes npu-sim" in capsys.readouterr().err


def test_report_without_a_run_is_an_error():
    with pytest.raises(KilnError, match="no run on the simulated accelerator"):
        run_report(kiln.build(small_cnn(batch=1), "npu-sim"))


def test_saving_a_model_built_for_npu_sim_is_refused_with_the_way_to_run_it(tmp_path):
    with pytest.raises(ArtifactError, match="kiln run/bench MODEL --target npu-sim"):
        kiln.build(small_cnn(batch=1), "npu-sim").export(tmp_path / "m")
