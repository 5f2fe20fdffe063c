"""What gcc makes of Kiln's C under FLAGS: the tests that pin a compiler flag read the assembly."""

import subprocess

import kiln
from kiln.codegen.c_source import generate
from kiln.codegen.compiler import FLAGS
from kiln.compiler.fuse import fuse
from kiln.target import find_compiler
from kiln.tune.tasks import extract_tasks, lower_with


def assembly(code: str, tmp_path) -> str:
    """`code` compiled with FLAGS (less those that link) to assembly text."""
    src, out = tmp_path / "k.c", tmp_path / "k.s"
    src.write_text(code)
    flags = [f for f in FLAGS if f not in ("-shared", "-fPIC")]
    subprocess.run([find_compiler(), *flags, "-S", "-o", str(out), str(src)], check=True)
    return out.read_text()


def task_source(model, op: str, config: dict | None = None) -> str:
    """The C of the first fused group of an ONNX `model` whose name contains `op`, as the build lowers it
    (with the schedule knobs of `config`)."""
    task = next(t for t in extract_tasks(fuse(kiln.from_onnx(model), 3)) if op in t.name)
    return generate([lower_with(task.fn, "k", config).func]).code
