import json

import pytest

from kiln.errors import InputError
from kiln.tune import records as rec


def test_records_round_trip_and_best(tmp_path):
    path = tmp_path / "log.jsonl"
    rs = [rec.Record("k1", "t", {"a": 1, "order": (0, 1)}, 2e-3, threads=2),
          rec.Record("k1", "t", {"a": 2, "order": (1, 0)}, 1e-3),
          rec.Record("k1", "t", {"a": 3}, None, error="timeout: no result"),
          rec.Record("k2", "t", {"a": 4}, 5e-3)]
    rec.append(path, rs[:2])
    rec.append(path, rs[2:])
    back = rec.load(path)
    assert [(r.key, r.config, r.seconds, r.error) for r in back] == [(r.key, r.config, r.seconds, r.error) for r in rs]
    assert back[1].config["order"] == (1, 0)  # tuples survive JSON
    line = json.loads(path.read_text().splitlines()[0])
    assert {"version", "key", "target", "config", "seconds", "timestamp"} <= set(line)
    assert rec.best(back, "k1").config == {"a": 2, "order": (1, 0)}
    assert rec.best(back, "k1", target="other") is None
    assert rec.best_configs(back) == {"k1": {"a": 2, "order": (1, 0)}}  # k2 has only its default


def test_a_config_must_beat_the_default_by_the_margin():
    rs = [rec.Record("k", "t", {"a": 0}, 1.00e-3),  # the default: the tuner measures it first
          rec.Record("k", "t", {"a": 1}, 0.97e-3),
          rec.Record("j", "t", {"a": 0}, 1.00e-3),
          rec.Record("j", "t", {"a": 2}, 0.90e-3)]
    assert rec.best_configs(rs) == {"j": {"a": 2}}
    assert rec.best_configs(rs, margin=0.0) == {"k": {"a": 1}, "j": {"a": 2}}


def test_a_torn_or_foreign_line_is_skipped(tmp_path):
    path = tmp_path / "log.jsonl"
    rec.append(path, [rec.Record("k", "t", {"a": 1}, 1.0)])
    with open(path, "a") as f:
        f.write('{"key": "k", "target": "t", "conf\n[1, 2]\n\n')
    rec.append(path, [rec.Record("k", "t", {"a": 2}, 0.5)])
    assert [r.config["a"] for r in rec.load(path)] == [1, 2]


def test_tuned_configs_filters_by_target_and_rejects_a_missing_file(tmp_path):
    path = tmp_path / "log.jsonl"
    rec.append(path, [rec.Record("k", "mine", {"a": 0}, 2.0), rec.Record("k", "mine", {"a": 1}, 1.0),
                      rec.Record("k", "theirs", {"a": 2}, 0.1)])
    assert rec.tuned_configs(path, "mine") == {"k": {"a": 1}}
    assert rec.tuned_configs({"k": {"a": 3}}, "mine") == {"k": {"a": 3}}
    with pytest.raises(InputError, match="no such file"):
        rec.tuned_configs(tmp_path / "missing.jsonl", "mine")


def test_a_pick_the_model_check_found_no_faster_is_not_applied(tmp_path):
    tuned = [rec.Record("k", "t", {"a": 0}, 1.0e-3), rec.Record("k", "t", {"a": 1}, 0.5e-3),
             rec.Record("j", "t", {"a": 0}, 1.0e-3), rec.Record("j", "t", {"a": 2}, 0.5e-3),
             rec.Record("i", "t", {"a": 0}, 1.0e-3), rec.Record("i", "t", {"a": 3}, 0.5e-3)]
    checks = [rec.Record("k", "t", {"a": 1}, None, in_model=(2.0e-3, 2.1e-3)),  # slower in the model
              rec.Record("j", "t", {"a": 9}, None, in_model=(2.0e-3, 3.0e-3)),  # another config's check
              rec.Record("i", "t", {"a": 3}, None, in_model=(2.0e-3, 2.5e-3)),
              rec.Record("i", "t", {"a": 3}, None, in_model=(2.0e-3, 1.5e-3))]  # checked again: the latest counts
    path = tmp_path / "log.jsonl"
    rec.append(path, tuned + checks)
    back = rec.load(path)
    assert [r.in_model for r in back[6:]] == [c.in_model for c in checks]
    assert json.loads(path.read_text().splitlines()[6])["in_model"] == [2.0e-3, 2.1e-3]
    assert rec.best_configs(back) == {"j": {"a": 2}, "i": {"a": 3}}
    assert rec.best_configs(tuned) == {"k": {"a": 1}, "j": {"a": 2}, "i": {"a": 3}}
    # a pick must beat its default there by the margin; a check is never a workload's default
    assert rec.Record("k", "t", {}, None, in_model=(1.0, 0.99)).rejected_in_model
    assert not rec.Record("k", "t", {}, None, in_model=(1.0, 0.97)).rejected_in_model
    assert rec.best_configs([checks[0]] + tuned[:2]) == {}
