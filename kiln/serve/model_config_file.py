"""A served model's config file (`NAME.json` beside the model or `NAME/config.json`): JSON with the
fields of `ModelConfig`. Every key and value is checked, and an error names the file and the key,
because a misspelt key silently ignored would serve the model with settings nobody asked for."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kiln.errors import RepositoryError
from kiln.serve.dispatch import ModelConfig, Priority


def _priority(v: Any) -> Priority:
    if v not in ("rt", "be"):
        raise ValueError('must be "rt" or "be"')
    return Priority(v)


def _int_at_least(low: int, none_ok: bool = False) -> Callable[[Any], int | None]:
    def check(v: Any) -> int | None:
        if v is None and none_ok:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise ValueError(f"must be an integer >= {low}" + (" or null" if none_ok else ""))
        return v
    return check


def _positive_seconds(v: Any) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        raise ValueError("must be a positive number of seconds or null")
    return float(v)


FIELD_RULES: dict[str, Callable[[Any], Any]] = {
    "priority": _priority,
    "cores": _int_at_least(1, none_ok=True),
    "max_batch": _int_at_least(0),
    "batch_delay_us": _int_at_least(0),
    "queue_limit": _int_at_least(1),
    "timeout_s": _positive_seconds,
    "replicas": _int_at_least(1),
}


def read_config(path: Path) -> ModelConfig:
    """The ModelConfig a config file sets (fields it leaves out keep their defaults)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RepositoryError(f"model config {path}: cannot read it as JSON: {e}") from None
    if not isinstance(data, dict):
        raise RepositoryError(f"model config {path}: must be a JSON object of settings, got {type(data).__name__}")
    fields = {}
    for key, value in data.items():
        if key not in FIELD_RULES:
            raise RepositoryError(f"model config {path}: unknown key '{key}'; the keys are {', '.join(FIELD_RULES)}")
        try:
            fields[key] = FIELD_RULES[key](value)
        except ValueError as e:
            raise RepositoryError(f"model config {path}: key '{key}' = {value!r} {e}") from None
    return ModelConfig(**fields)
