"""The `replicas` key of a served model's config and `kiln serve --ray`, where no Ray cluster is needed."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

import kiln
from kiln.cli import build_parser
from kiln.distributed.ray_env import worker_env
from kiln.errors import DistributedError, RepositoryError
from kiln.serve.model_config_file import read_config
from kiln.serve.server import make_dispatcher


def _config(tmp_path, doc) -> object:
    path = tmp_path / "m.json"
    path.write_text(json.dumps(doc))
    return read_config(path)


def test_replicas_is_read_and_defaults_to_one(tmp_path):
    assert _config(tmp_path, {"replicas": 3}).replicas == 3
    assert _config(tmp_path, {}).replicas == 1


@pytest.mark.parametrize("value", [0, -1, 1.5, "2", True, None])
def test_a_bad_replica_count_names_the_file_and_the_key(tmp_path, value):
    with pytest.raises(RepositoryError, match=r"m\.json: key 'replicas' = .* must be an integer >= 1"):
        _config(tmp_path, {"replicas": value})


def test_a_misspelt_key_lists_replicas_among_the_keys(tmp_path):
    with pytest.raises(RepositoryError, match="unknown key 'replica'.*replicas"):
        _config(tmp_path, {"replica": 2})


def test_serve_ray_flag_takes_an_optional_address():
    parse = build_parser().parse_args
    assert parse(["serve", "repo"]).ray is False
    assert parse(["serve", "repo", "--ray"]).ray is True
    assert parse(["serve", "repo", "--ray", "ray://head:10001"]).ray == "ray://head:10001"


def test_serve_ray_without_ray_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(DistributedError, match=r"pip install 'kiln\[ray\]'"):
        make_dispatcher("reef", ray=True)


def test_a_source_checkout_goes_on_the_workers_path_and_an_installed_kiln_does_not(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    root = Path(kiln.__file__).resolve().parents[1]
    env = worker_env()
    if {"site-packages", "dist-packages"} & set(root.parts):
        assert env is None
    else:
        assert env["env_vars"]["PYTHONPATH"].split(os.pathsep) == [str(root), "/elsewhere"]
