"""Kiln's own fuzzer: seed models (seeds.py), structured mutations (mutations.py), one case run and
classified (case.py), guarded worker subprocesses and the report (runner.py, `make fuzz N=...`).
Every case that ever failed is kept in regressions/ (model + JSON of its expected outcome) and
replayed by test_fuzz.py."""
