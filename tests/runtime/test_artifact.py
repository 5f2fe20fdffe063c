"""Compiled-model directories: round trip without a compiler, atomic writes, refusals."""

from __future__ import annotations

import dataclasses
import json
import mmap
import os
import subprocess
import sys

import numpy as np
import pytest

import kiln
from kiln.codegen.cache import CompileCache
from kiln.models import small_cnn
from kiln.runtime import artifact
from kiln.runtime.artifact import ArtifactError


def _image(batch: int) -> np.ndarray:
    return np.random.default_rng(batch).standard_normal((batch, 3, 32, 32)).astype(np.float32)


@pytest.fixture(scope="module")
def static_model():
    return kiln.build(small_cnn(batch=2))


@pytest.fixture(scope="module")
def dynamic_model():
    return kiln.build(small_cnn())


@pytest.fixture
def exported(static_model, tmp_path):
    return static_model.export(tmp_path / "cnn")


@pytest.fixture
def no_compiler(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("loading a compiled model must not compile")

    monkeypatch.setattr(CompileCache, "build", refuse)


def test_round_trip_of_an_aot_model_runs_without_compiling(static_model, exported, no_compiler):
    assert sorted(os.listdir(exported)) == ["kiln_pool.so", "model.json", "model.so", "weights.bin"]
    meta = json.loads((exported / "model.json").read_text())
    assert meta["kiln_version"] == kiln.__version__ and "-march=native" in meta["compiler_flags"]
    assert meta["inputs"] == [{"name": "image", "shape": [2, 3, 32, 32], "dtype": "float32"}]
    assert meta["target"] == str(kiln.Target.host())
    sess = kiln.load(exported)
    x = _image(2)
    np.testing.assert_array_equal(sess.run(None, {"image": x})[0], static_model.run({"image": x})[0])


def test_round_trip_of_a_dynamic_model_keeps_symbolic_dims(dynamic_model, tmp_path, no_compiler):
    sess = kiln.load(dynamic_model.export(tmp_path / "dyn"))
    assert sess.get_inputs()[0].shape == ["N", 3, 32, 32]
    for batch in (1, 3):  # the graph executor is what was exported (not the builds per input shape)
        x = _image(batch)
        np.testing.assert_array_equal(sess.run(None, {"image": x})[0], dynamic_model.runner.run({"image": x})[0])
    again = sess.export(tmp_path / "again")  # a loaded model exports again
    np.testing.assert_array_equal(kiln.load(again).run(None, {"image": x})[0], sess.run(None, {"image": x})[0])


def test_failed_export_leaves_nothing(static_model, tmp_path, monkeypatch):
    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(artifact, "write_weights", fail)
    with pytest.raises(OSError, match="disk full"):
        static_model.export(tmp_path / "cnn")
    assert os.listdir(tmp_path) == []


def test_export_replaces_an_artifact_but_not_other_directories(static_model, exported, tmp_path):
    assert static_model.export(exported) == exported and kiln.load(exported)
    assert sorted(os.listdir(tmp_path)) == ["cnn"]
    other = tmp_path / "photos"
    other.mkdir()
    (other / "cat.jpg").write_bytes(b"\xff\xd8")
    with pytest.raises(ArtifactError, match="not a compiled Kiln model; refusing"):
        static_model.export(other)
    assert os.listdir(other) == ["cat.jpg"]


def _edit_meta(d, **changes) -> None:
    meta = json.loads((d / "model.json").read_text())
    meta.update(changes)
    (d / "model.json").write_text(json.dumps(meta))


def test_refuses_another_kiln_version(exported):
    _edit_meta(exported, kiln_version="0.0.1")
    with pytest.raises(ArtifactError, match="compiled by Kiln 0.0.1.*compile the model again"):
        kiln.load(exported)


def test_refuses_a_cpu_without_a_feature_it_was_built_for(exported):
    """A target with ISA features this CPU lacks (whatever this CPU is: amx_int8 and sve2 no CPU has both)."""
    wanted = kiln.Target.host().features | {"amx_int8", "sve2"}
    lacking = sorted(wanted - kiln.Target.host().features)
    _edit_meta(exported, target=str(dataclasses.replace(kiln.Target.host(), features=wanted)))
    with pytest.raises(ArtifactError, match=f"{', '.join(lacking)}, which this CPU lacks"):
        kiln.load(exported)


def test_warns_about_another_core_count_and_runs_that_many_threads(exported):
    host = kiln.Target.host()
    _edit_meta(exported, target=str(dataclasses.replace(host, cores=host.cores + 2)))
    with pytest.warns(UserWarning, match=f"built for {host.cores + 2} cores, this machine has {host.cores}"):
        sess = kiln.load(exported)
    assert sess.threads is None  # more cores than here: OpenMP's default, all of them
    if host.cores > 1:
        _edit_meta(exported, target=str(dataclasses.replace(host, cores=1)))
        with pytest.warns(UserWarning, match=f"built for 1 cores, this machine has {host.cores}"):
            assert kiln.load(exported).threads == 1


def test_refuses_corrupt_or_missing_files(exported):
    (exported / "weights.bin").unlink()
    with pytest.raises(ArtifactError, match="missing weights.bin"):
        kiln.load(exported)
    data = bytearray((exported / "model.so").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (exported / "model.so").write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="model.so is corrupt"):
        kiln.load(exported)
    (exported / "model.so").unlink()
    with pytest.raises(ArtifactError, match="missing model.so"):
        kiln.load(exported)
    (exported / "model.json").write_text("{not json")
    with pytest.raises(ArtifactError, match="model.json is corrupt"):
        kiln.load(exported)
    (exported / "model.json").unlink()
    with pytest.raises(ArtifactError, match="no model.json"):
        kiln.load(exported)
    with pytest.raises(ArtifactError, match="not a directory"):
        kiln.load(exported / "nothing")


def _largest_weight(d) -> dict:
    return max(json.loads((d / "model.json").read_text())["weights"], key=lambda t: t["nbytes"])


def test_a_corrupt_weight_is_named_and_verify_weights_false_skips_the_check(static_model, exported):
    t = _largest_weight(exported)
    data = bytearray((exported / "weights.bin").read_bytes())
    for i in range(t["offset"] + 3, t["offset"] + t["nbytes"], 4):  # every float32's sign and exponent byte
        data[i] ^= 0x40
    (exported / "weights.bin").write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match=f"weights.bin: weight '{t['name']}' .* is corrupt: its crc32"):
        kiln.load(exported)
    x = _image(2)
    out = kiln.load(exported, verify_weights=False).run(None, {"image": x})[0]
    assert not np.array_equal(out, static_model.run({"image": x})[0])  # the damaged weight is what ran


def test_truncated_weights_name_the_file_and_sizes(exported):
    data = (exported / "weights.bin").read_bytes()
    (exported / "weights.bin").write_bytes(data[:len(data) // 2])
    with pytest.raises(ArtifactError, match=f"weights.bin is truncated: {len(data) // 2} bytes, its index needs"):
        kiln.load(exported)


def test_an_inconsistent_index_entry_is_named(exported):
    meta = json.loads((exported / "model.json").read_text())
    meta["weights"][0]["shape"] = [*meta["weights"][0]["shape"], 3]
    (exported / "model.json").write_text(json.dumps(meta))
    with pytest.raises(ArtifactError, match=f"index entry of weight '{meta['weights'][0]['name']}' is inconsistent"):
        kiln.load(exported)


def test_an_older_format_says_to_compile_again(exported):
    _edit_meta(exported, format_version=2)
    with pytest.raises(ArtifactError, match=r"\(format 2\); this is Kiln .* \(format 4\): compile the model again"):
        kiln.load(exported)


def test_weights_are_aligned_read_only_views_of_the_mapped_file(exported):
    weights = kiln.load(exported).model.runner.weights
    index = json.loads((exported / "model.json").read_text())["weights"]
    assert len(weights) > 1 and all(t["offset"] % 64 == 0 for t in index)
    for w in weights:
        assert not w.flags.writeable and w.ctypes.data % 64 == 0
        base = w
        while isinstance(base, np.ndarray):
            base = base.base
        assert isinstance(base.obj, mmap.mmap)  # a view of the mapping: no copy between the file and the kernels


_RUN_WITHOUT_GCC = """
import sys, numpy as np, kiln
sess = kiln.load(sys.argv[1])
x = np.random.default_rng(2).standard_normal((2, 3, 32, 32)).astype(np.float32)
np.save(sys.argv[2], sess.run(None, {"image": x})[0])
"""


def test_a_deployed_directory_loads_its_own_pool_without_gcc(static_model, exported, tmp_path):
    """A fresh process with no compiler on PATH and an empty cache loads the pool the directory carries."""
    env = dict(os.environ, PATH="/nonexistent", KILN_CACHE_DIR=str(tmp_path / "empty-cache"),
               PYTHONPATH=os.pathsep.join(sys.path))
    out = tmp_path / "out.npy"
    proc = subprocess.run([sys.executable, "-c", _RUN_WITHOUT_GCC, str(exported), str(out)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    x = np.random.default_rng(2).standard_normal((2, 3, 32, 32)).astype(np.float32)
    np.testing.assert_array_equal(np.load(out), static_model.run({"image": x})[0])
