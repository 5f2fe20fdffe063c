"""The start-up cost of a deployed model (issue 35): a fresh process that imports, loads a compiled
artifact and runs it once, Kiln beside ONNX Runtime on the same model's ONNX file.

    .venv/bin/python scripts/load_time.py mlp small_cnn [--repeat 5] [--batch 1]

The model (from kiln.models) is built with a static batch and exported once; then each process is
started `--repeat` times (after one warm-up start that fills the bytecode and page caches, as an
installed package has them) and the fastest start is reported. Each process times its own phases:
import (numpy with the engine: `import kiln` and the runtime behind `kiln.load`, or `import
onnxruntime`), load (`kiln.load(DIR)` or `InferenceSession(path)`) and the first run; `process` is
the parent's wall time of the whole process, interpreter start-up and exit included. Issue 35's
goal: Kiln's import + load + first run <= 0.3 s. Wall times: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import onnx

import kiln
from kiln import models

# Each child prints {"import": s, "load": s, "run": s}; argv[1] is the model, argv[2] the input's shape.
CHILD = {
    "kiln": """
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import kiln
load = kiln.load  # kiln's names are lazy: this imports the runtime
t1 = time.perf_counter()
session = load(sys.argv[1])
t2 = time.perf_counter()
name = session.get_inputs()[0].name
session.run(None, {name: np.ones(json.loads(sys.argv[2]), np.float32)})
t3 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "load": t2 - t1, "run": t3 - t2}))
""",
    "onnxruntime": """
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import onnxruntime
t1 = time.perf_counter()
session = onnxruntime.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
t2 = time.perf_counter()
name = session.get_inputs()[0].name
session.run(None, {name: np.ones(json.loads(sys.argv[2]), np.float32)})
t3 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "load": t2 - t1, "run": t3 - t2}))
""",
}


def child_env(pycache: Path) -> dict[str, str]:
    """The parent's environment, with bytecode written (to `pycache`) so that starts after the first
    read it, and this checkout of Kiln first on the path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    root = str(Path(__file__).resolve().parent.parent)
    return {**env, "PYTHONPYCACHEPREFIX": str(pycache), "PYTHONPATH": root + os.pathsep + env.get("PYTHONPATH", "")}


def start(engine: str, model: str, shape: list[int], env: dict[str, str]) -> dict[str, float]:
    """One fresh process: its phase times and the whole process's wall time."""
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD[engine], model, json.dumps(shape)], capture_output=True,
                          text=True, env=env, timeout=600)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{engine} on {model} failed:\n{done.stderr}")
    phases = json.loads(done.stdout.splitlines()[-1])
    return {**phases, "total": sum(phases.values()), "process": wall}


def fastest(engine: str, model: str, shape: list[int], env: dict[str, str], repeat: int) -> dict[str, float]:
    start(engine, model, shape, env)  # warm-up: bytecode and page caches
    return min((start(engine, model, shape, env) for _ in range(repeat)), key=lambda r: r["total"])


def export(name: str, batch: int, where: Path) -> tuple[str, str, list[int]]:
    """(artifact directory, ONNX file, input shape) of kiln.models.`name` at a static batch."""
    proto = getattr(models, name)(batch=batch)
    onnx_path = where / f"{name}.onnx"
    onnx.save(proto, str(onnx_path))
    directory = kiln.build(proto).export(where / name)
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    return str(directory), str(onnx_path), [d.dim_value for d in dims]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="+", help="names in kiln.models (mlp, small_cnn, resnet18, ...)")
    p.add_argument("--repeat", type=int, default=5, help="process starts per engine; the fastest is reported")
    p.add_argument("--batch", type=int, default=1)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kiln-load-time-") as tmp:
        where = Path(tmp)
        env = child_env(where / "pycache")
        print(f"{'model':<12} {'engine':<12} {'import':>8} {'load':>8} {'run':>8} {'total':>8} {'process':>8}")
        for name in args.models:
            directory, onnx_path, shape = export(name, args.batch, where)
            for engine, model in (("kiln", directory), ("onnxruntime", onnx_path)):
                r = fastest(engine, model, shape, env, args.repeat)
                print(f"{name:<12} {engine:<12} " + " ".join(f"{r[k]:8.3f}" for k in
                                                             ("import", "load", "run", "total", "process")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
