"""`kiln serve` on the command line: its options, its errors, and that other commands never import
the server (uvicorn stays out of `kiln run`)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kiln.cli import build_parser, main
from tests.serve.http.test_sigterm import ROOT


def test_parser_defaults():
    args = build_parser().parse_args(["serve", "repo"])
    assert (args.repo, args.host, args.port, args.scheduler, args.max_body_mb) == ("repo", "127.0.0.1", 8000, "reef",
                                                                                    64)


def test_a_missing_repository_is_a_clear_error(tmp_path, capsys):
    assert main(["serve", str(tmp_path / "none"), "--scheduler", "fifo"]) == 2
    assert "model repository" in capsys.readouterr().err


def test_a_bad_body_limit_is_a_clear_error(tmp_path, capsys):
    assert main(["serve", str(tmp_path), "--max-body-mb", "0"]) == 2
    assert "--max-body-mb must be positive" in capsys.readouterr().err


def _python(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                          env={"PYTHONPATH": ROOT, "PATH": "/usr/bin:/bin"}).stdout.strip()


def test_other_commands_do_not_import_the_server():
    out = _python("import sys, kiln.cli as c; c.build_parser().parse_args(['run', 'm.onnx']); "
                  "print(sorted(m for m in sys.modules if m.startswith(('uvicorn', 'kiln.serve'))))")
    assert out == "[]"


def test_missing_uvicorn_names_the_extra():
    out = _python("import sys; sys.modules['uvicorn'] = None\n"
                  "from kiln.serve.server import uvicorn_server\n"
                  "try:\n    uvicorn_server(None)\nexcept Exception as e:\n    print(e)")
    assert out == "kiln serve needs uvicorn and httptools: pip install kiln[serve]"


def test_an_unknown_scheduler_is_named():
    from kiln.errors import KilnError
    from kiln.serve.server import make_dispatcher

    with pytest.raises(KilnError, match="unknown scheduler 'lottery'"):
        make_dispatcher("lottery")
