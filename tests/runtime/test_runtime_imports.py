"""Running a compiled model imports only the runtime (issue 35): in a fresh process, `import kiln`,
`kiln.load` + a run of an exported model, and `kiln run DIR` leave none of the compiler side
(tests.imports.COMPILER_SIDE: the compiler, passes, te, tir's passes, topi, tuning, the frontend, onnx,
the C generator) loaded, while `import kiln; kiln.build(...)` still compiles."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import kiln
from tests.imports import compiler_side

ROOT = Path(__file__).resolve().parents[2]
MODULES = "import json, sys; print(json.dumps(sorted(sys.modules)))"


def _python(code: str, *args: str) -> list[str]:
    """Run `code` in a fresh interpreter; the modules it had loaded (the JSON list its last line prints)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, str]:
    """A static-shape MLP (the AOT executor) and one with a symbolic batch (the graph executor), each
    built by a fresh `import kiln; kiln.build(...)` and exported."""
    out = {}
    for name, batch in (("aot", "1"), ("graph", "'N'")):
        out[name] = str(tmp_path_factory.mktemp("artifacts") / name)
        _python("import sys, kiln\nfrom kiln.models import mlp\n"
                f"kiln.build(mlp(batch={batch}, sizes=(16, 32, 4))).export(sys.argv[1])\n" + MODULES, out[name])
    return out


def test_import_kiln_loads_no_compiler_side_module():
    loaded = _python("import kiln\n" + MODULES)
    assert compiler_side(loaded) == []
    assert "numpy" not in loaded


@pytest.mark.parametrize("executor", ["aot", "graph"])
def test_loading_and_running_an_artifact_loads_no_compiler_side_module(exported, executor):
    loaded = _python("import sys, numpy as np, kiln\ns = kiln.load(sys.argv[1])\n"
                     "(y,) = s.run(None, {'input': np.ones((2, 16), np.float32)[:1 if sys.argv[2] == 'aot' else 2]})\n"
                     "assert y.shape[1] == 4 and np.isfinite(y).all()\n" + MODULES, exported[executor], executor)
    assert compiler_side(loaded) == []


def test_kiln_run_on_a_directory_loads_no_compiler_side_module(exported):
    loaded = _python("import sys\nfrom kiln.cli import main\nassert main(['run', sys.argv[1]]) == 0\n" + MODULES,
                     exported["aot"])
    assert compiler_side(loaded) == []


def test_the_check_sees_a_compiler_import():
    assert "kiln.compiler" in compiler_side(_python("import kiln\nkiln.build\n" + MODULES))


def test_a_group_compiled_at_run_time_imports_the_compiler_then(exported):
    """The seam kiln.runtime.specialize keeps: a loaded model's callback imports the compiler on first use."""
    loaded = _python("import sys, kiln\nfrom kiln.session import _compile_specialized\n"
                     "try:\n    _compile_specialized()\nexcept TypeError:\n    pass\n" + MODULES)
    assert "kiln.compiler.specialize" in loaded


@pytest.mark.parametrize("name", kiln.__all__ + ["models", "transform", "codegen"])
def test_every_public_name_resolves_in_a_fresh_process(name):
    _python(f"import kiln\nassert kiln.{name} is not None\n" + MODULES)
