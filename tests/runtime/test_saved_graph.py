"""An AOT artifact loads without its graph (issue 35): the saved interface is enough to run it, and the graph
text is parsed, with every operator record and type inference, only when something reads it."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kiln
from kiln.ir.printer import text
from kiln.models import small_cnn
from kiln.runtime.artifact import ArtifactError
from kiln.runtime.saved_graph import SavedGraph

ROOT = Path(__file__).resolve().parents[2]

_LOAD_AND_RUN = """
import json, sys, numpy as np, kiln
s = kiln.load(sys.argv[1])
(y,) = s.run(None, {"image": np.load(sys.argv[2])})
np.save(sys.argv[3], y)
print(json.dumps(sorted(sys.modules)))
"""


def _image() -> np.ndarray:
    return np.random.default_rng(5).standard_normal((2, 3, 32, 32)).astype(np.float32)


@pytest.fixture(scope="module")
def built():
    return kiln.build(small_cnn(batch=2))


@pytest.fixture
def exported(built, tmp_path):
    return built.export(tmp_path / "cnn")


def test_a_fresh_load_and_run_imports_no_operator_record_parser_or_type_inference(built, exported, tmp_path):
    np.save(tmp_path / "x.npy", _image())
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", _LOAD_AND_RUN, str(exported), str(tmp_path / "x.npy"),
                           str(tmp_path / "y.npy")], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout.splitlines()[-1]))
    graph_side = {"kiln.op", "kiln.op.registry", "kiln.op.typerel", "kiln.op.interpreter", "kiln.ir.parser",
                  "kiln.runtime.executor", "kiln.tir"}
    assert sorted(loaded & graph_side) == []
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), built.run({"image": _image()})[0])


def test_the_graph_is_parsed_when_read_and_equals_the_built_one(built, exported):
    model = kiln.load(exported).model
    assert isinstance(model.mod, SavedGraph) and model.mod._executor is None
    assert [vars(i) for i in model.inputs] == [vars(i) for i in built.inputs]
    assert [vars(o) for o in model.outputs] == [vars(o) for o in built.outputs]
    assert model.mod._executor is None  # the interface came from model.json
    assert text(model.mod) == text(built.mod)
    assert model.mod.input_vars[0].type == model.mod.main.params[0].type
    assert model.mod.output_types == built.mod.output_types


def test_a_loaded_aot_model_exports_again(built, exported, tmp_path):
    again = kiln.load(exported).model.export(tmp_path / "again")
    x = _image()
    np.testing.assert_array_equal(kiln.load(again).run(None, {"image": x})[0], built.run({"image": x})[0])


def test_a_damaged_graph_text_is_refused_at_load(exported):
    meta = json.loads((exported / "model.json").read_text())
    meta["graph"] = meta["graph"].replace("nn.", "nx.", 1)
    (exported / "model.json").write_text(json.dumps(meta))
    with pytest.raises(ArtifactError, match="the graph text is corrupt"):
        kiln.load(exported)


def test_a_bad_graph_behind_a_good_digest_fails_when_read(exported):
    """A graph that passes its digest but does not parse (written by a broken exporter) fails where it is
    read, as an ArtifactError naming the file."""
    meta = json.loads((exported / "model.json").read_text())
    meta["graph"] = meta["graph"].replace("nn.", "nx.", 1)
    meta["graph_sha256"] = hashlib.sha256(meta["graph"].encode()).hexdigest()
    (exported / "model.json").write_text(json.dumps(meta))
    model = kiln.load(exported).model
    with pytest.raises(ArtifactError, match="model.json: the graph does not parse"):
        model.export(exported.parent / "again")


def test_kiln_run_on_an_aot_directory_parses_no_graph(exported):
    code = ("import json, sys\nfrom kiln.cli import main\nassert main(['run', sys.argv[1]]) == 0\n"
            "print(json.dumps(sorted(sys.modules)))")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", code, str(exported)], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.splitlines()[-1])
    assert [m for m in loaded if m.startswith("kiln.op") or m in ("kiln.ir.parser", "kiln.runtime.executor")] == []
