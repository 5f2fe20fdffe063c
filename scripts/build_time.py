"""Build seconds per stage of a specialized build (issue 30: a 100-kernel model fully specialized within 30 s).

Each model builds in a fresh process with an empty KILN_CACHE_DIR (a new user's first build): the wall
seconds of `kiln.build` (batch 1, static, opt level 2), its stages (kiln.codegen.build_profile: passes,
lower, plan, codegen, gcc) and the kernel count. `--workers N` sets KILN_LOWER_WORKERS (0: lowering in
the building process only; default: one worker per core beyond the first), so two runs compare the
parallel lowering with the serial one. `--c-dir DIR` writes each library's C there (DIR/NAME.c): the
generated code of two Kiln versions compares byte for byte (`cmp`). Run it on a quiet machine.

    .venv/bin/python scripts/build_time.py mlp resnet18 mobilenet_v2 googlenet [--workers 0] [--c-dir out/]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

DEFAULT_MODELS = ("mlp", "resnet18", "mobilenet_v2", "googlenet")  # googlenet: 105 kernels

CHILD = """
import json, sys, time
from pathlib import Path
from kiln import models
from kiln.models.wide import WIDE
name, c_dir = sys.argv[1], sys.argv[2]
model = getattr(models, name)(batch=1) if hasattr(models, name) else WIDE[name].build(1)
t0 = time.perf_counter()
import kiln
cm = kiln.build(model, opt_level=2)
wall = time.perf_counter() - t0
if c_dir:
    Path(c_dir, name + ".c").write_text(cm.library.source.code)
print(json.dumps({"wall": wall, "kernels": cm.report.kernels, "executor": cm.executor,
                  "stages": cm.report.profile.stages}))
"""
STAGES = ("passes", "lower", "plan", "codegen", "pch", "compile", "gcc_wall")


def measure(name: str, workers: int | None, c_dir: str) -> dict:
    """One cold build of `name` in a child process: its JSON line."""
    with tempfile.TemporaryDirectory(prefix="kiln-build-time-") as cache:
        env = dict(os.environ, KILN_CACHE_DIR=cache)
        if workers is not None:
            env["KILN_LOWER_WORKERS"] = str(workers)
        proc = subprocess.run([sys.executable, "-c", CHILD, name, c_dir], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{name}: the build failed\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=list(DEFAULT_MODELS),
                    help="kiln.models functions or kiln.models.wide names")
    ap.add_argument("--workers", type=int, default=None, help="KILN_LOWER_WORKERS for the builds")
    ap.add_argument("--c-dir", default="", help="write each library's C into this folder")
    ap.add_argument("--json", help="write the results here as well")
    args = ap.parse_args()
    if args.c_dir:
        Path(args.c_dir).mkdir(parents=True, exist_ok=True)
    print(f"{'model':<16}{'kernels':>8}{'wall s':>9}" + "".join(f"{s:>10}" for s in STAGES), flush=True)
    results = {}
    for name in args.models:
        r = results[name] = measure(name, args.workers, args.c_dir)
        print(f"{name:<16}{r['kernels']:>8}{r['wall']:>9.1f}"
              + "".join(f"{r['stages'].get(s, 0.0):>10.1f}" for s in STAGES), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
