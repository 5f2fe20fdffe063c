"""Tuning records: one JSON line per measured candidate, the log that builds read.

Each line is {version, key, target, config, seconds, timestamp} (+ error for failed candidates,
whose seconds is null, and threads). A line with `in_model` [default seconds, config's seconds] and
null seconds is no measurement of the kernel alone but a check of a pick inside the model
(kiln.compiler.in_model_check): a pick that was not faster there than its default is not applied.

Lines are appended with one O_APPEND write each, so several tuners may share a file and a reader
never sees half a record; a line that does not parse (a file cut short by a crash) is skipped. No
pickle: configs are plain JSON values.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

VERSION = 1


@dataclass(frozen=True)
class Record:
    key: str  # workload key (kiln.tune.tasks.workload_key)
    target: str
    config: dict[str, object]
    seconds: float | None  # median time of one call; None when the candidate failed
    timestamp: float = field(default_factory=time.time)
    version: int = VERSION
    error: str | None = None
    threads: int | None = None
    in_model: tuple[float, float] | None = None  # a check in the model: (default's, this config's) seconds

    def to_json(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items() if v is not None or k == "seconds"},
                          sort_keys=True)

    @staticmethod
    def from_json(line: str) -> Record:
        d = json.loads(line)
        if not isinstance(d, dict) or not isinstance(d.get("config"), dict):
            raise ValueError("not a record")
        seconds = d.get("seconds")
        config = {str(k): _tuples(v) for k, v in d["config"].items()}
        in_model = d.get("in_model")
        if in_model is not None:
            in_model = (float(in_model[0]), float(in_model[1]))
        return Record(str(d["key"]), str(d["target"]), config, None if seconds is None else float(seconds),
                      float(d.get("timestamp", 0.0)), int(d.get("version", VERSION)), d.get("error"),
                      d.get("threads"), in_model)

    @property
    def rejected_in_model(self) -> bool:
        """Whether this is a check in the model that found the config no faster than the default."""
        return self.in_model is not None and self.in_model[1] >= self.in_model[0] * (1 - IN_MODEL_MARGIN)


def _tuples(v: object) -> object:
    """JSON has no tuples; knob choices (a loop order) are tuples, and a config must name one exactly."""
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


def append(path: str | os.PathLike, records: Iterable[Record]) -> None:
    """Append records, each line in a single write (atomic with respect to other appenders)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        for r in records:
            os.write(fd, (r.to_json() + "\n").encode())
    finally:
        os.close(fd)


def load(path: str | os.PathLike) -> list[Record]:
    """Every readable record of the file (none if it does not exist)."""
    p = Path(path)
    if not p.exists():
        return []
    out = []
    for line in p.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            r = Record.from_json(line)
        except (ValueError, KeyError, TypeError):
            continue
        if r.version <= VERSION:
            out.append(r)
    return out


def best(records: Iterable[Record], key: str, target: str | None = None) -> Record | None:
    """The fastest successful record of the workload (on `target`, when given)."""
    ok = [r for r in records if r.key == key and r.seconds is not None and (target is None or r.target == target)]
    return min(ok, key=lambda r: r.seconds) if ok else None


MARGIN = 0.05  # a config must beat its workload's default by more than this to be applied
IN_MODEL_MARGIN = 0.02  # ... and, where checked in the model, by more than this there


def best_configs(records: Iterable[Record], target: str | None = None,
                 margin: float = MARGIN) -> dict[str, dict[str, object]]:
    """Workload key -> the config of its fastest record: what a build applies, when it beats the
    workload's default (its first record: the tuner measures the default first) by more than
    `margin`; otherwise the default schedule stays.

    Why a margin: the tuner times each kernel alone (hot caches, no neighbours), and the fastest
    of many noisy measurements is biased low. Wins of a few percent there lost inside the model at
    2 threads (mobilenet_v2 tuned 4.62 ms against 3.86 untuned). A pick that a check in the model
    (the latest for that config) found no faster than the default there is not applied either."""
    first: dict[str, Record] = {}
    fastest: dict[str, Record] = {}
    checks: dict[tuple[str, str], Record] = {}
    for r in records:
        if target is not None and r.target != target:
            continue
        if r.in_model is not None:
            checks[r.key, _config_text(r.config)] = r
            continue
        first.setdefault(r.key, r)
        if r.seconds is not None and (r.key not in fastest or r.seconds < fastest[r.key].seconds):
            fastest[r.key] = r
    out = {}
    for k, r in fastest.items():
        default = first[k].seconds
        if default is not None and r.seconds > default * (1 - margin):
            continue
        check = checks.get((k, _config_text(r.config)))
        if check is not None and check.rejected_in_model:
            continue
        out[k] = dict(r.config)
    return out


def _config_text(config: Mapping[str, object]) -> str:
    return json.dumps(config, sort_keys=True)


def tuned_configs(source: str | os.PathLike | Mapping[str, Mapping[str, object]] | None,
                  target: str) -> dict[str, dict[str, object]]:
    """What a build passes to the lowering: a records file's best configs for `target`, or a given map."""
    if source is None:
        return {}
    if isinstance(source, Mapping):
        return {k: dict(v) for k, v in source.items()}
    if not Path(source).exists():
        from kiln.errors import InputError

        raise InputError(f"tuning records {str(source)!r}: no such file (write one with `kiln tune`)")
    return best_configs(load(source), target)
