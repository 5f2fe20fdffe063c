"""Memory per model: the liveness lower bound of the chosen order, the arena, the naive sum, the peak of the
plain topological order against the searched order's (and whether the search proved it minimal, and how
long it took), and the peak RSS of a run in a separate process beside ONNX Runtime's.

The models are the benchmark set (kiln.models, batch 1) and generated irregular networks (random wiring
and NAS-style cells, tests/irregular_dags.py). Each model is built, exported, and run in a fresh
process for the RSS (so compiling is not counted); ONNX Runtime runs the same file in another fresh
process. Usage:

    .venv/bin/python scripts/memory_report.py                       # everything (minutes: gcc per model)
    .venv/bin/python scripts/memory_report.py --models mlp --dags 1 --json out.json
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))


@dataclass
class Row:
    model: str
    kernels: int
    lower_bound: int
    arena: int
    naive: int
    topological_peak: int
    searched_peak: int
    exact: bool
    search_s: float
    rss_kiln_mib: float | None = None
    rss_ort_mib: float | None = None

    def line(self) -> str:
        ratio = self.topological_peak / self.searched_peak if self.searched_peak else 1.0
        rss = "" if self.rss_kiln_mib is None else \
            f"  RSS kiln {self.rss_kiln_mib:7.1f} MiB  ort {self.rss_ort_mib:7.1f} MiB"
        return (f"{self.model:22s} {self.kernels:4d} kernels  bound {self.lower_bound / 2**20:8.3f} MiB  arena "
                f"{self.arena / 2**20:8.3f} MiB (x{self.arena / max(self.lower_bound, 1):.3f})  naive "
                f"{self.naive / 2**20:8.3f} MiB  topo/searched peak x{ratio:.3f} "
                f"({'exact' if self.exact else 'budget'}, {self.search_s:.2f} s){rss}")


def dag_models(count: int, size: int) -> list[tuple[str, object]]:
    """The first `count` of: random wiring with 16 and 32 nodes, 3 and 5 NAS cells, over seeds."""
    from tests.irregular_dags import channels_for, dag_model, nas_cells, watts_strogatz

    shapes = [("ws16", lambda s: watts_strogatz(s, 16)), ("nas3", lambda s: nas_cells(s, 3)),
              ("ws32", lambda s: watts_strogatz(s, 32)), ("nas5", lambda s: nas_cells(s, 5))]
    out = []
    for k in range(count):
        name, make = shapes[k % len(shapes)]
        seed = k // len(shapes)
        preds = make(seed)
        out.append((f"{name}-seed{seed}", dag_model(preds, channels_for(seed, preds), seed, size)))
    return out


def measure(name: str, model, args: argparse.Namespace, work: Path) -> Row:
    import onnx

    import kiln

    compiled = kiln.build(model, executor="aot", opt_level=args.opt_level, memory_strategy=args.strategy,
                          memory_order_budget=args.budget)
    r = compiled.runner.memory_report()
    row = Row(name, len(r.order), r.lower_bound, r.arena_bytes, r.naive_bytes, r.topological_peak, r.search_peak,
              r.search_exact, r.search_seconds)
    if args.rss:
        onnx.save(model, work / f"{name}.onnx")
        compiled.export(work / name)
        row.rss_kiln_mib = _child_rss("kiln", work / name, work / f"{name}.onnx", args.runs)
        row.rss_ort_mib = _child_rss("ort", work / f"{name}.onnx", work / f"{name}.onnx", args.runs)
    return row


def _child_rss(engine: str, path: Path, onnx_path: Path, runs: int) -> float:
    out = subprocess.run([sys.executable, __file__, "--child", engine, str(path), str(onnx_path), str(runs)],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    return float(out.stdout.split()[-1])


def child(engine: str, path: str, onnx_path: str, runs: int) -> None:
    """Load `path` with one engine, run it, print the process's peak RSS in MiB."""
    import onnx

    from bench_models import feeds_for

    feeds = feeds_for(onnx.load(onnx_path))
    if engine == "kiln":
        import kiln

        session = kiln.load(path, threads=1)
    else:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = opts.inter_op_num_threads = 1
        session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    for _ in range(runs):
        session.run(None, feeds)
    print(_peak_rss_mib())


def _peak_rss_mib() -> float:
    """This process's peak resident set (VmHWM): not ru_maxrss, which Linux carries over an exec from the
    parent that forked the child (every child would report at least the builder's peak)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    from bench_models import MODELS, make_model

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="*", default=list(MODELS))
    p.add_argument("--dags", type=int, default=8, help="how many generated irregular networks")
    p.add_argument("--dag-size", type=int, default=32, help="their feature maps' height and width")
    p.add_argument("--strategy", choices=("arena", "counted"), default="arena")
    p.add_argument("--budget", type=float, default=10.0, help="seconds for the order search (per model)")
    p.add_argument("--opt-level", type=int, default=2)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--no-rss", dest="rss", action="store_false", help="skip the separate-process runs")
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        engine, path, onnx_path, runs = args.child
        child(engine, path, onnx_path, int(runs))
        return
    rows = []
    with tempfile.TemporaryDirectory(prefix="kiln-memory-report-") as tmp:
        models = [(m, make_model(m, 1)) for m in args.models] + dag_models(args.dags, args.dag_size)
        for name, model in models:
            t0 = time.perf_counter()
            rows.append(measure(name, model, args, Path(tmp)))
            print(f"{rows[-1].line()}  [{time.perf_counter() - t0:.0f} s]", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=1))


if __name__ == "__main__":
    main()
