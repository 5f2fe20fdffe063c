"""A conv's register tile stays in registers when its epilogue is a plain copy: without
-fno-tree-loop-distribute-patterns gcc turned the copy-out of the accumulator array into a memcpy, which
kept the array in memory, and every FMA of the tile read and wrote the stack (2.2x slower)."""

import subprocess

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln
from kiln.codegen.c_source import generate
from kiln.codegen.compiler import FLAGS, find_compiler
from kiln.runtime.executor import fuse
from kiln.tune.tasks import extract_tasks, lower_with


def _conv_without_epilogue() -> str:
    """The C of a 1x1 conv with no bias or activation, as the build lowers it."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((16, 16, 1, 1)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 14, 14])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 14, 14])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    task = next(t for t in extract_tasks(fuse(kiln.from_onnx(model), 3)) if "conv" in t.name)
    return generate([lower_with(task.fn, "k", None).func]).code


def test_conv_tile_accumulates_in_registers(tmp_path):
    src, out = tmp_path / "k.c", tmp_path / "k.s"
    src.write_text(_conv_without_epilogue())
    flags = [f for f in FLAGS if f not in ("-shared", "-fPIC")]
    subprocess.run([find_compiler(), *flags, "-S", "-o", str(out), str(src)], check=True)
    fmas = [line for line in out.read_text().splitlines() if "vfmadd" in line]
    if not fmas:
        pytest.skip("the host has no FMA instructions")
    assert not [line for line in fmas if "%rsp" in line or "%rbp" in line]
