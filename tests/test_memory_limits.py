"""Hostile sizes end in a clean MemoryLimitError (or another KilnError) before memory is touched:
through the interpreter, both compiled executors and the CLI; normal models are unaffected."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln
from kiln.cli import main
from kiln.errors import KilnError, MemoryLimitError, ShapeError
from kiln.feeds import random_feeds
from kiln.ir import sizes
from kiln.ir.expr import Call
from kiln.target import host_available_memory
from kiln.transform.fold_constant import fold_expr

F32 = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=()) -> bytes:
    graph = helper.make_graph(nodes, "m", inputs, outputs, [numpy_helper.from_array(a, n) for n, a in inits])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def _out(rank: int):
    return helper.make_tensor_value_info("y", F32, [f"d{i}" for i in range(rank)])


def constant_of_shape(shape: list[int]) -> bytes:
    return _model([helper.make_node("ConstantOfShape", ["s"], ["y"], name="big_cos")], [], [_out(len(shape))],
                  [("s", np.array(shape, np.int64))])


def expand() -> bytes:
    return _model([helper.make_node("Expand", ["a", "s"], ["y"], name="big_expand")],
                  [helper.make_tensor_value_info("a", F32, [1, 1])], [_out(2)],
                  [("s", np.array([1 << 30, 1 << 30], np.int64))])


def tile() -> bytes:
    return _model([helper.make_node("Tile", ["a", "r"], ["y"], name="big_tile")],
                  [helper.make_tensor_value_info("a", F32, [2, 2])], [_out(2)],
                  [("r", np.array([1 << 30, 1 << 30], np.int64))])


def range_() -> bytes:
    scalars = [(n, np.array(v, np.float32)) for n, v in (("s", 0), ("l", 1e15), ("d", 1))]
    return _model([helper.make_node("Range", ["s", "l", "d"], ["y"], name="big_range")], [], [_out(1)], scalars)


def relu(shape: list[int | str]) -> bytes:
    return _model([helper.make_node("Relu", ["a"], ["y"], name="r")], [helper.make_tensor_value_info("a", F32, shape)],
                  [helper.make_tensor_value_info("y", F32, shape)])


# model, the node the error names, the shape it names
HOSTILE = {
    "constant_of_shape_1e15": (lambda: constant_of_shape([10**5] * 3), "big_cos", "[100000, 100000, 100000]"),
    "constant_of_shape_overflow": (lambda: constant_of_shape([1 << 62, 4]), "big_cos", f"[{1 << 62}, 4]"),
    "expand": (expand, "big_expand", f"[{1 << 30}, {1 << 30}]"),
    "tile": (tile, "big_tile", f"[{1 << 31}, {1 << 31}]"),
    "range": (range_, "big_range", "[999999986991104]"),
}


def _feeds(model: bytes) -> dict[str, np.ndarray]:
    mod = kiln.from_onnx(model)
    return {p.name: np.ones([int(d) for d in p.type.shape], np.float32) for p in mod.main.params}


def _named(err: pytest.ExceptionInfo, node: str, shape: str) -> None:
    text = str(err.value)
    assert node in text and f"shape {shape} float32" in text and "needs" in text, text


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_interpreter_refuses_hostile_sizes(case):
    make, node, shape = HOSTILE[case]
    model = make()
    with pytest.raises(MemoryLimitError) as err:
        kiln.evaluate(kiln.from_onnx(model), _feeds(model))
    _named(err, node, shape)


@pytest.mark.parametrize("executor", ["aot", "graph"])
@pytest.mark.parametrize("case", ["constant_of_shape_1e15", "constant_of_shape_overflow", "expand", "range"])
def test_compiled_executors_refuse_hostile_sizes(case, executor):
    make, node, shape = HOSTILE[case]
    model = make()
    with pytest.raises(MemoryLimitError) as err:
        kiln.build(model, executor=executor).run(_feeds(model))
    _named(err, node, shape)


def test_constant_of_shape_from_an_input_value_is_refused_at_run_time():
    model = _model([helper.make_node("ConstantOfShape", ["s"], ["y"], name="big_cos")],
                   [helper.make_tensor_value_info("s", TensorProto.INT64, [3])], [_out(3)])
    feeds = {"s": np.array([10**5] * 3, np.int64)}
    with pytest.raises(MemoryLimitError) as err:
        kiln.evaluate(kiln.from_onnx(model), feeds)
    _named(err, "big_cos", "[100000, 100000, 100000]")
    with pytest.raises(MemoryLimitError) as err:
        kiln.build(model, executor="graph").run(feeds)
    _named(err, "big_cos", "[100000, 100000, 100000]")
    with pytest.raises(KilnError):  # a negative dim from a value: the reference names the node
        kiln.evaluate(kiln.from_onnx(model), {"s": np.array([4, -3, 1], np.int64)})


def test_session_memory_limit_bounds_build_and_run():
    model = constant_of_shape([1000, 1000])  # 4 MB
    with pytest.raises(MemoryLimitError, match="1.0 MiB is the memory limit"):
        kiln.build(model, executor="aot", memory_limit=1 << 20)
    with pytest.raises(MemoryLimitError, match="big_cos"):
        kiln.build(model, executor="graph", memory_limit=1 << 20).run({})
    with pytest.raises(MemoryLimitError, match="big_cos"):
        kiln.InferenceSession(model, executor="graph", memory_limit=1 << 20).run(None, {})
    with sizes.memory_limit(1 << 20), pytest.raises(MemoryLimitError, match="big_cos"):
        kiln.evaluate(kiln.from_onnx(model), {})
    with pytest.raises(KilnError, match="memory_limit"):
        kiln.build(model, memory_limit=-1)


def test_sparse_constant_is_checked_before_it_is_made_dense():
    sparse = helper.make_sparse_tensor(numpy_helper.from_array(np.ones(2, np.float32), "v"),
                                       numpy_helper.from_array(np.array([0, 5], np.int64), "i"), [10**6, 10**6])
    model = _model([helper.make_node("Constant", [], ["y"], sparse_value=sparse)], [], [_out(2)])
    with pytest.raises(MemoryLimitError, match=r"sparse tensor 'v' needs 3.6 TiB \(shape \[1000000, 1000000\]"):
        kiln.from_onnx(model)


def test_conv_transpose_of_a_huge_stride_is_refused_not_rewritten():
    model = _model([helper.make_node("ConvTranspose", ["a", "w"], ["y"], strides=[10**6, 10**6], name="ct")],
                   [helper.make_tensor_value_info("a", F32, [1, 1, 2, 2])], [_out(4)],
                   [("w", np.ones((1, 1, 3, 3), np.float32))])
    with pytest.raises(MemoryLimitError, match="ct"):
        kiln.evaluate(kiln.from_onnx(model), _feeds(model))
    with pytest.raises(MemoryLimitError, match="ct"):  # conv-transpose-to-conv leaves it, the plan refuses it
        kiln.build(model, executor="aot")


def test_normal_models_are_unaffected():
    model = relu([2, 3])
    x = np.arange(-3, 3, dtype=np.float32).reshape(2, 3)
    want = np.maximum(x, 0)
    np.testing.assert_array_equal(kiln.evaluate(kiln.from_onnx(model), {"a": x})[0], want)
    for executor in ("aot", "graph"):
        np.testing.assert_array_equal(kiln.build(model, executor=executor, memory_limit=1 << 20).run({"a": x})[0],
                                      want)
    y = kiln.build(constant_of_shape([2, 3]), memory_limit=1 << 20).run({})[0]
    np.testing.assert_array_equal(y, np.zeros((2, 3), np.float32))


def test_byte_counts_are_exact_and_reject_overflow_and_negative_dims():
    assert sizes.tensor_bytes([2, 3], "float32", "t") == 24
    assert sizes.tensor_bytes([], "int8", "t") == 1
    assert sizes.tensor_bytes([0, 1 << 62], "float64", "t") == 0
    with pytest.raises(MemoryLimitError, match="more than any machine can address"):
        sizes.tensor_bytes([1 << 62, 4], "float32", "t")  # 2**64 bytes: int64 arithmetic would wrap to 0
    with pytest.raises(ShapeError, match="negative dim"):
        sizes.tensor_bytes([4, -3], "float32", "t")
    assert sizes.format_bytes(8 << 40) == "8.0 TiB" and sizes.format_bytes(100) == "100 bytes"


def test_bound_is_the_limit_in_force_else_the_available_memory():
    available = host_available_memory()
    assert available is None or available > 0
    with sizes.memory_limit(1000):
        assert sizes.current_limit() == (1000, "the memory limit")
        with pytest.raises(MemoryLimitError, match=r"input 'x' needs 3.9 KiB \(shape \[1000\] float32\); "
                                                   r"1000 bytes is the memory limit"):
            sizes.check_alloc("input 'x'", [1000], "float32")
    assert sizes.current_limit()[1] in ("available", "addressable")


def test_available_memory_is_read_from_meminfo(tmp_path):
    info = tmp_path / "meminfo"
    info.write_text("MemTotal:       32000000 kB\nMemFree:  100 kB\nMemAvailable:   20000000 kB\n")
    assert host_available_memory(str(info)) == 20000000 * 1024
    assert host_available_memory(str(tmp_path / "missing")) is None


def test_fold_constant_leaves_a_huge_fold_unfolded():
    mod = kiln.from_onnx(constant_of_shape([10**5] * 3))
    assert isinstance(fold_expr(mod.main).body.fields[0], Call)
    small = kiln.from_onnx(constant_of_shape([2, 3]))
    assert not isinstance(fold_expr(small.main).body.fields[0], Call)


def test_random_feeds_check_before_drawing():
    mod = kiln.from_onnx(relu(["N", "M"]))
    with pytest.raises(MemoryLimitError, match=rf"input 'a' needs .* \(shape \[{1 << 40}, {1 << 40}\] float32\)"):
        random_feeds(mod, {}, {"N": 1 << 40, "M": 1 << 40})
    with pytest.raises(ShapeError, match="input 'a'"):
        random_feeds(mod, {}, {"N": -1, "M": 2})
    assert random_feeds(mod, {}, {"N": 2, "M": 3})["a"].shape == (2, 3)


@pytest.mark.parametrize("argv,needle", [
    (["--dim", f"N={1 << 40}", "--dim", f"M={1 << 40}"], "input 'a' needs"),
    (["--dim", "N=-1", "--dim", "M=2"], "non-negative"),
])
def test_cli_refuses_huge_random_inputs(tmp_path, capsys, argv, needle):
    path = tmp_path / "relu.onnx"
    path.write_bytes(relu(["N", "M"]))
    assert main(["run", str(path), *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_cli_checks_an_input_file_header_before_reading_it(tmp_path, capsys):
    path, npy = tmp_path / "relu.onnx", tmp_path / "a.npy"
    path.write_bytes(relu(["N", "M"]))
    np.save(npy, np.ones((2, 3), np.float32))
    raw = npy.read_bytes()
    npy.write_bytes(raw.replace(b"'shape': (2, 3), ", b"'shape': (99999999999, 3), ", 1)[:len(raw)])
    assert main(["run", str(path), "--input", f"a={npy}"]) == 2
    err = capsys.readouterr().err
    assert "shape [99999999999, 3] float32" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("executor", ["interpreter", "compiled"])
def test_cli_refuses_a_huge_constant_of_shape(tmp_path, capsys, executor):
    path = tmp_path / "cos.onnx"
    path.write_bytes(constant_of_shape([10**5] * 3))
    assert main(["run", str(path), "--executor", executor]) == 2
    err = capsys.readouterr().err
    assert "big_cos" in err and "3.6 PiB" in err and len(err.strip().splitlines()) == 1


def test_onnx_checker_accepts_the_hostile_models():
    for make, _, _ in HOSTILE.values():
        onnx.checker.check_model(onnx.load_from_string(make()))


def test_an_allocation_the_process_may_not_take_is_a_memory_limit_error(monkeypatch):
    """The size checks passed, the allocation did not (a ulimit below the machine's memory): still a Kiln error
    naming the bytes, not numpy's MemoryError (the fuzzer's case 5037: a 4.77 GiB arena under a 4 GiB cap)."""
    from kiln.ir import aligned

    def refuse(*args, **kwargs):
        raise MemoryError("Unable to allocate")

    monkeypatch.setattr(aligned.np, "empty", refuse)
    with pytest.raises(MemoryLimitError, match=r"could not allocate 5120000000 bytes \(shape \[5120000000\] uint8\)"):
        aligned.aligned_empty(5_120_000_000, "uint8")
