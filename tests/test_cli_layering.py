"""The `kiln` commands (cli, bench, demo, tune_command) share helpers through feeds.py and summary.py,
not through one another, and the tune library imports no command and no frontend."""

import pytest

from tests.imports import KILN, private_names, upward

COMMANDS = ["cli", "bench", "demo", "tune_command"]
HELPERS = ["feeds", "summary"]


@pytest.mark.parametrize("name", COMMANDS[1:] + HELPERS)
def test_only_cli_imports_the_commands(name):
    others = tuple(f"kiln.{c}" for c in COMMANDS if c != name)
    assert upward([KILN / f"{name}.py"], others) == []


def test_the_tune_library_imports_no_command_and_no_frontend():
    files = sorted((KILN / "tune").rglob("*.py"))
    assert upward(files, ("kiln.frontend", "kiln.bench", "kiln.cli", "kiln.demo", "kiln.tune_command")) == []


def test_the_commands_import_no_private_name():
    assert private_names([KILN / f"{name}.py" for name in COMMANDS + HELPERS]) == []
