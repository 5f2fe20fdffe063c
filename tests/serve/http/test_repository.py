"""The model repository: entries, versions, config files, and names checked before any path is made."""

from __future__ import annotations

import json

import pytest

from kiln.errors import RepositoryError, UnknownModelError
from kiln.serve.dispatch import ModelConfig, Priority
from kiln.serve.repository import Repository, check_name


def _touch(path, text: str = "x") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_entries_versions_and_configs(tmp_path):
    _touch(tmp_path / "a.onnx")
    _touch(tmp_path / "a.json", json.dumps({"priority": "rt", "cores": 1, "timeout_s": 0.5}))
    _touch(tmp_path / "b" / "2" / "model.onnx")
    _touch(tmp_path / "b" / "10" / "model.json")
    _touch(tmp_path / "b" / "config.json", json.dumps({"max_batch": 8, "batch_delay_us": 200}))
    _touch(tmp_path / "c" / "model.onnx")
    _touch(tmp_path / ".hidden.onnx")
    _touch(tmp_path / "notes.txt")
    repo = Repository(tmp_path)
    assert repo.names() == ["a", "b", "c"]
    a, b, c = repo.find("a"), repo.find("b"), repo.find("c")
    assert (a.path.name, a.version, a.compiled) == ("a.onnx", "1", False)
    assert a.config == ModelConfig(priority=Priority.RT, cores=1, timeout_s=0.5)
    assert (b.path, b.version, b.compiled) == (tmp_path / "b" / "10", "10", True)
    assert b.config == ModelConfig(max_batch=8, batch_delay_us=200)
    assert (c.path, c.config) == (tmp_path / "c" / "model.onnx", ModelConfig())


@pytest.mark.parametrize(("config", "words"), [
    ({"priority": "urgent"}, "key 'priority' = 'urgent' must be \"rt\" or \"be\""),
    ({"cores": 0}, "key 'cores' = 0 must be an integer >= 1 or null"),
    ({"queue_limit": True}, "key 'queue_limit' = True must be an integer >= 1"),
    ({"timeout_s": -1}, "key 'timeout_s' = -1 must be a positive number"),
    ({"max_batch_size": 4}, "unknown key 'max_batch_size'"),
    ([1], "must be a JSON object"),
])
def test_config_errors_name_file_and_key(tmp_path, config, words):
    _touch(tmp_path / "m.onnx")
    _touch(tmp_path / "m.json", json.dumps(config))
    with pytest.raises(RepositoryError, match="m.json") as e:
        Repository(tmp_path).find("m")
    assert words in str(e.value)


def test_config_not_json(tmp_path):
    _touch(tmp_path / "m" / "model.onnx")
    _touch(tmp_path / "m" / "config.json", "{")
    with pytest.raises(RepositoryError, match="config.json: cannot read it as JSON"):
        Repository(tmp_path).find("m")


def test_two_configs_are_an_error(tmp_path):
    _touch(tmp_path / "m" / "model.onnx")
    _touch(tmp_path / "m" / "config.json", "{}")
    _touch(tmp_path / "m.json", "{}")
    with pytest.raises(RepositoryError, match="keep one"):
        Repository(tmp_path).find("m")


def test_missing_model_file_and_unknown_model(tmp_path):
    (tmp_path / "empty" / "3").mkdir(parents=True)
    with pytest.raises(RepositoryError, match="holds neither a compiled Kiln model"):
        Repository(tmp_path).find("empty")
    with pytest.raises(UnknownModelError, match="'ghost' is not in the repository"):
        Repository(tmp_path).find("ghost")
    with pytest.raises(RepositoryError, match="is not a directory"):
        Repository(tmp_path / "nothing")


@pytest.mark.parametrize("name", ["..", ".", "../etc", "a/b", ".hidden", "", "x" * 200, "m.onnx", "a\\b", "a b"])
def test_names_that_could_leave_the_repository_are_refused(name):
    with pytest.raises(RepositoryError, match="not a valid model name"):
        check_name(name)


def test_ordinary_names_pass():
    assert [check_name(n) for n in ("resnet50", "bert-base_v2", "m.v1")] == ["resnet50", "bert-base_v2", "m.v1"]
