"""A conv's register tile stays in registers when its epilogue is a plain copy: without
-fno-tree-loop-distribute-patterns gcc turned the copy-out of the accumulator array into a memcpy, which
kept the array in memory, and every FMA of the tile read and wrote the stack (2.2x slower)."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.codegen.assembly import assembly, task_source


def _conv_without_epilogue(config: dict | None = None) -> str:
    """The C of a 1x1 conv with no bias or activation, as the build lowers it."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((16, 16, 1, 1)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 14, 14])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 14, 14])], [w])
    return task_source(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), "conv", config)


def _stack_fmas(code: str, tmp_path) -> tuple[int, int]:
    """(FMAs, FMAs that read the stack) in the assembly of `code`."""
    fmas = [line for line in assembly(code, tmp_path).splitlines() if "vfmadd" in line]
    if not fmas:
        pytest.skip("the host has no FMA instructions")
    return len(fmas), len([line for line in fmas if "%rsp" in line or "%rbp" in line])


def test_conv_tile_accumulates_in_registers(tmp_path):
    assert _stack_fmas(_conv_without_epilogue({"conv.ci_unroll_hint": False}), tmp_path)[1] == 0


def test_conv_tile_unrolled_by_gcc_stays_in_registers(tmp_path):
    """With its channel loop unrolled by gcc (a pointwise conv that does not expand), gcc may spill one value
    of the 8 steps: at most one FMA in 32 reads the stack (with the memcpy every one did)."""
    fmas, on_stack = _stack_fmas(_conv_without_epilogue(), tmp_path)
    assert on_stack <= fmas // 32
