"""Test-session settings: property tests are derandomized under CI (CI=true), so a CI run is
repeatable; locally they explore new examples each run."""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
