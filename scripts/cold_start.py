"""Issue 30's goals, measured as a new user meets them: an unseen model, an empty compile cache.

For each model (from kiln.models, static batch), in fresh processes:
  cold         KILN_CACHE_DIR empty: from the first line of the process (`import kiln` included) through
               `InferenceSession(path)` to the first result (goal <= 3 s), the tier that gave it, and on to
               fully specialized (`wait_for_compile`; goal <= 30 s for 100 kernels), with the kernel count;
  generic      the generic tier's latency (kiln.runtime.generic_executor; its library already built),
               median of --runs runs (goal: within 3x of ONNX Runtime);
  onnxruntime  ONNX Runtime's latency on the same file and inputs;
  specialized  the compiled model's latency (`wait_for_compile=True`, the build cached by `cold`);
  alternate    the generic tier and ONNX Runtime in one process, taking turns (kiln.bench.alternate), so
               that machine noise hits both alike: the generic/ORT ratio to trust on a busy machine; with
               --threads 1 also the calling thread's CPU time per run (best of 5), which waiting on
               other processes does not inflate.
Every child runs with --threads threads (OMP_NUM_THREADS for Kiln, intra_op_num_threads for ORT). Every output
is checked against ONNX Runtime's (max abs difference in the table). Wall times: run it on a
quiet machine.

    .venv/bin/python scripts/cold_start.py mlp resnet18 [--runs 20] [--batch 1] [--threads 2] [--json out.json]
    .venv/bin/python scripts/cold_start.py --ratio-only    # only `alternate`, every model: no compile
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_models import MODELS, feeds_for, make_model  # noqa: E402

# each child: argv[1] the .onnx file, argv[2] the .npz of inputs, argv[3] where to save outputs, argv[4] runs;
# it prints one JSON object
_TIMED = """
def timed(run, runs):
    import time
    for _ in range(2):
        run()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]
"""
CHILD = {
    "cold": """
import time
t0 = time.perf_counter()
import json, sys
import numpy as np
import kiln
feeds = dict(np.load(sys.argv[2]))
session = kiln.InferenceSession(sys.argv[1])
outs = session.run(None, feeds)
first = time.perf_counter() - t0
tier = session.status.tier
session.wait_for_compile()
done = time.perf_counter() - t0
np.savez(sys.argv[3], *outs)
print(json.dumps({"first_result_s": first, "first_tier": tier, "specialized_s": done,
                  "kernels": session.status.kernels_total}))
""",
    "generic": _TIMED + """
import json, sys
import numpy as np
import kiln
from kiln.runtime.generic_executor import GenericExecutor
feeds = dict(np.load(sys.argv[2]))
ex = GenericExecutor(kiln.from_onnx(sys.argv[1]), kiln.Target.host())
np.savez(sys.argv[3], *ex.run(feeds))
print(json.dumps({"generic_ms": timed(lambda: ex.run(feeds), int(sys.argv[4])) * 1e3}))
""",
    "onnxruntime": _TIMED + """
import json, sys
import numpy as np
import onnxruntime as ort
feeds = dict(np.load(sys.argv[2]))
options = ort.SessionOptions()
options.intra_op_num_threads = int(sys.argv[5])
s = ort.InferenceSession(sys.argv[1], options, providers=["CPUExecutionProvider"])
np.savez(sys.argv[3], *s.run(None, feeds))
print(json.dumps({"onnxruntime_ms": timed(lambda: s.run(None, feeds), int(sys.argv[4])) * 1e3}))
""",
    "specialized": _TIMED + """
import json, sys
import numpy as np
import kiln
feeds = dict(np.load(sys.argv[2]))
s = kiln.InferenceSession(sys.argv[1], wait_for_compile=True)
np.savez(sys.argv[3], *s.run(None, feeds))
print(json.dumps({"specialized_ms": timed(lambda: s.run(None, feeds), int(sys.argv[4])) * 1e3}))
""",
    "alternate": """
import json, sys
import numpy as np
import onnxruntime as ort
import kiln
from kiln.bench import Engine, alternate
from kiln.runtime.generic_executor import GenericExecutor
feeds = dict(np.load(sys.argv[2]))
ex = GenericExecutor(kiln.from_onnx(sys.argv[1]), kiln.Target.host())
options = ort.SessionOptions()
options.intra_op_num_threads = int(sys.argv[5])
s = ort.InferenceSession(sys.argv[1], options, providers=["CPUExecutionProvider"])
np.savez(sys.argv[3], *ex.run(feeds))
engines = [Engine("generic", lambda: ex.run(feeds)), Engine("ort", lambda: s.run(None, feeds))]
alternate(engines, int(sys.argv[4]))
ms = {e.name: sorted(e.times)[len(e.times) // 2] * 1e3 for e in engines}
def cpu_ms(run):
    import time
    best = float("inf")
    for _ in range(5):
        t = time.thread_time()
        run()
        best = min(best, time.thread_time() - t)
    return best * 1e3
cpu = {e.name: cpu_ms(e.run) for e in engines}
print(json.dumps({"alternate_generic_ms": ms["generic"], "alternate_ort_ms": ms["ort"],
                  "cpu_generic_ms": cpu["generic"], "cpu_ort_ms": cpu["ort"]}))
""",
}


def _child(kind: str, model: Path, inputs: Path, outputs: Path, runs: int, threads: int, cache: Path) -> dict:
    env = {**os.environ, "KILN_CACHE_DIR": str(cache), "OMP_NUM_THREADS": str(threads)}
    argv = [sys.executable, "-c", CHILD[kind], str(model), str(inputs), str(outputs), str(runs), str(threads)]
    proc = subprocess.run(argv,
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{kind} child failed on {model.name}:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _max_diff(a: Path, b: Path) -> float:
    with np.load(a) as x, np.load(b) as y:
        return max(float(np.max(np.abs(x[k].astype(np.float64) - y[k]))) if x[k].size else 0.0 for k in x.files)


def measure_ratio(name: str, batch: int, runs: int, threads: int, work: Path) -> dict:
    """The generic tier against ONNX Runtime only, taking turns in one process (no specialized build)."""
    model = make_model(name, batch)
    path, inputs, out = work / f"{name}.onnx", work / f"{name}.inputs.npz", work / f"{name}.alternate.npz"
    onnx.save(model, str(path))
    np.savez(inputs, **feeds_for(model))
    row = {"model": name, "batch": batch, **_child("alternate", path, inputs, out, runs, threads, work)}
    row["alternate_generic_vs_ort"] = row["alternate_generic_ms"] / row["alternate_ort_ms"]
    row["cpu_generic_vs_ort"] = row["cpu_generic_ms"] / row["cpu_ort_ms"]
    return row


def measure(name: str, batch: int, runs: int, threads: int, work: Path) -> dict:
    """One model's row: every child in its own process, the cold one on an empty compile cache."""
    model = make_model(name, batch)
    path = work / f"{name}.onnx"
    onnx.save(model, str(path))
    inputs = work / f"{name}.inputs.npz"
    np.savez(inputs, **feeds_for(model))
    cache = Path(tempfile.mkdtemp(prefix=f"kiln-cold-{name}-", dir=work))
    row: dict = {"model": name, "batch": batch}
    outs = {k: work / f"{name}.{k}.npz" for k in CHILD}
    for kind in ("onnxruntime", "cold", "generic", "specialized", "alternate"):  # cold first: its cache is empty
        row.update(_child(kind, path, inputs, outs[kind], runs, threads, cache))
    row["max_diff_vs_ort"] = {k: _max_diff(outs[k], outs["onnxruntime"]) for k in CHILD if k != "onnxruntime"}
    row["generic_vs_ort"] = row["generic_ms"] / row["onnxruntime_ms"]
    row["alternate_generic_vs_ort"] = row["alternate_generic_ms"] / row["alternate_ort_ms"]
    return row


def _print(rows: list[dict]) -> None:
    print(f"{'model':14s} {'kernels':>7s} {'first s':>8s} {'tier':>8s} {'special s':>9s} {'generic ms':>10s} "
          f"{'ORT ms':>8s} {'gen/ORT':>7s} {'alt g/O':>7s} {'spec ms':>8s} {'max diff':>9s}")
    for r in rows:
        diff = max(r["max_diff_vs_ort"].values())
        print(f"{r['model']:14s} {r['kernels']:7d} {r['first_result_s']:8.2f} {r['first_tier']:>8s} "
              f"{r['specialized_s']:9.1f} {r['generic_ms']:10.2f} {r['onnxruntime_ms']:8.2f} "
              f"{r['generic_vs_ort']:7.2f} {r['alternate_generic_vs_ort']:7.2f} {r['specialized_ms']:8.2f} {diff:9.2e}")
    print("alt g/O: generic/ORT taking turns in one process")
    print("goals: first s <= 3; gen/ORT <= 3; special s <= 30 for 100 kernels; spec ms no slower than today's build")


def _print_ratios(rows: list[dict], threads: int) -> None:
    cpu = threads == 1  # the calling thread's CPU time is the whole run's only on one thread
    print(f"{'model':14s} {'generic ms':>10s} {'ORT ms':>8s} {'gen/ORT':>7s}" + (f" {'cpu g/O':>7s}" if cpu else ""))
    for r in rows:
        print(f"{r['model']:14s} {r['alternate_generic_ms']:10.2f} {r['alternate_ort_ms']:8.2f} "
              f"{r['alternate_generic_vs_ort']:7.2f}" + (f" {r['cpu_generic_vs_ort']:7.2f}" if cpu else ""))
    print("taking turns in one process" + ("; cpu g/O: CPU time per run" if cpu else "") + "; goal: gen/ORT <= 3")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="*", default=list(MODELS), help=f"kiln.models names (default: {' '.join(MODELS)})")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--runs", type=int, default=20, help="timed runs per latency (median; default 20)")
    p.add_argument("--threads", type=int, default=2, help="threads of every engine (default 2)")
    p.add_argument("--ratio-only", action="store_true",
                   help="only the generic tier against ONNX Runtime, taking turns (no compile: seconds a model)")
    p.add_argument("--json", metavar="FILE", help="write every number to FILE")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="kiln-cold-") as work:
        how = measure_ratio if args.ratio_only else measure
        rows = [how(name, args.batch, args.runs, args.threads, Path(work)) for name in args.models]
    if args.ratio_only:
        _print_ratios(rows, args.threads)
    else:
        _print(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
