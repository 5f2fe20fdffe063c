"""The pieces every distributed path shares, without Ray: bundles, the model worker, Ray's absence."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import kiln
from kiln.distributed import bundle, ray_env
from kiln.distributed.model_worker import ModelWorker
from kiln.errors import DistributedError
from kiln.models import small_cnn


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    model = kiln.build(small_cnn(batch=1))
    return model, model.export(tmp_path_factory.mktemp("m") / "cnn")


def test_bundle_round_trip_keeps_every_file(compiled, tmp_path):
    _, directory = compiled
    packed = bundle.pack(directory)
    out = bundle.unpack(packed, tmp_path)
    assert sorted(p.name for p in out.iterdir()) == sorted(packed)
    assert all((out / n).read_bytes() == data for n, data in packed.items())
    assert bundle.unpack(packed, tmp_path) != out  # every unpack gets a directory of its own


@pytest.mark.parametrize("name", ["../evil", "a/b", "", "..", "x\0y"])
def test_bundle_refuses_names_that_are_not_plain_files(name, tmp_path):
    with pytest.raises(DistributedError, match="not a plain file name"):
        bundle.unpack({name: b"x"}, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_pack_refuses_what_is_not_a_compiled_directory(tmp_path):
    with pytest.raises(DistributedError, match="not a compiled model directory"):
        bundle.pack(tmp_path / "missing")
    (tmp_path / "sub").mkdir()
    with pytest.raises(DistributedError, match="not files"):
        bundle.pack(tmp_path)


def test_model_worker_runs_like_the_model(compiled):
    model, directory = compiled
    worker = ModelWorker(bundle.pack(directory), threads=1)
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    name = model.inputs[0].name
    got = worker.run({name: x})
    assert list(got) == [o.name for o in model.outputs]
    np.testing.assert_array_equal(got[model.outputs[0].name], model.run({name: x})[0])
    assert worker.info()["inputs"][0][0] == name
    worker.close()


def test_missing_ray_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(DistributedError, match=r"pip install 'kiln\[ray\]'"):
        ray_env.require_ray()


def test_connect_refuses_cpus_for_an_existing_cluster():
    pytest.importorskip("ray")
    with pytest.raises(DistributedError, match="num_cpus"):
        ray_env.connect("127.0.0.1:1", num_cpus=2)
