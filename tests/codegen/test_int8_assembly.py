"""The int8 micro-kernels in the assembly gcc makes of a quantized matmul's kernel built for a target with
them: vpdpbusd for VNNI (compiled with this host's flags: the kernel carries its ISA in a target attribute),
vpmaddubsw + vpmaddwd
for AVX2 (and no vpdpbusd there: unused kernels of the header are not compiled in)."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln
from kiln.codegen.c_source import generate
from kiln.compiler.fuse import fuse
from kiln.target import Target
from kiln.transform.infra import PassContext
from kiln.tune.tasks import extract_tasks, lower_with
from tests.codegen.assembly import assembly


def _qgemm_source(kernel: str) -> str:
    """The C of the qgemm group of a MatMulInteger with a constant int8 weight, built for `kernel`."""
    w = numpy_helper.from_array(np.random.default_rng(0).integers(-128, 128, (64, 32)).astype(np.int8), "w")
    graph = helper.make_graph([helper.make_node("MatMulInteger", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.UINT8, [8, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [8, 32])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    features = "avx,avx2,fma" + (",avx512f,avx512bw,avx512_vnni" if kernel == "vnni" else "")
    target = Target.parse(f"c -arch=x86_64 -features={features}")
    fused = fuse(kiln.from_onnx(model), 3, PassContext(opt_level=3, target=target, config={"int8_ops.kernel": kernel}))
    task = next(t for t in extract_tasks(fused) if "qgemm" in t.name)
    return generate([lower_with(task.fn, "k", None).func]).code


@pytest.mark.parametrize("kernel,instructions", [("vnni", ("vpdpbusd",)),
                                                 ("avx2", ("vpmaddubsw", "vpmaddwd")),
                                                 ("avx2_split", ("vpmaddubsw", "vpmaddwd"))])
def test_micro_kernel_instructions(kernel, instructions, tmp_path):
    code = _qgemm_source(kernel)
    assert f"kiln_i8_tile_{kernel}(" in code
    asm = assembly(code, tmp_path)
    for ins in instructions:
        assert ins in asm, f"{kernel}: no {ins} in the assembly"
    if kernel != "vnni":
        assert "vpdpbusd" not in asm
