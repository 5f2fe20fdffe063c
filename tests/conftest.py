"""Test-session settings: property tests are derandomized under CI (CI=true), so a CI run is
repeatable; locally they explore new examples each run. Every session compiles into its own kernel
and library cache, so no run reads what an earlier run (or an older Kiln) left in ~/.cache/kiln. Builds lower
in the test's own process (KILN_LOWER_WORKERS=0): tests patch the compiler in-process, which a worker process
would not see; tests/compiler/test_lower_workers.py turns the workers on."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(scope="session", autouse=True)
def _session_compile_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KILN_CACHE_DIR", str(tmp_path_factory.mktemp("kiln-cache")))
        mp.setenv("KILN_LOWER_WORKERS", "0")
        yield
