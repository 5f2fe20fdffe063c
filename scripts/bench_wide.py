"""The wide benchmark (issue 31, `make bench-wide`): Kiln vs ONNX Runtime vs PyTorch eager on every
model of kiln.models.wide, at each batch size and thread count asked for.

Each engine runs in its own worker process (this script with --worker), so no engine's thread pool,
allocator or caches are shared with another's. The engines take turns: the parent resumes one worker
(SIGCONT), which runs untimed for 100 ms and then times --burst runs, and stops it again (SIGSTOP)
before the next one's turn, so a stopped engine's spinning threads cannot steal the cores.
The table gives medians, Kiln/ORT and torch/ORT ratios, Kiln's achieved GFLOP/s (conv/matmul/gemm
work) and its share of this machine's FP32 FMA peak (scripts/machine_limits.py), geomeans per batch
and thread count; every engine's outputs are checked against ONNX Runtime's. Where an engine cannot
run a model (an op torch's replay lacks, say), its cell is n/a and the reason is listed. Usage:

    .venv/bin/python scripts/bench_wide.py --models mlp resnet18 --batch 1 --threads 2 --runs 10 \
        --json bench_wide.json --markdown bench_wide.md
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

# kiln_pool: Kiln on its own thread pool (-threading=kiln) instead of libgomp's team, when asked for
ENGINES = ("kiln", "onnxruntime", "torch_eager", "kiln_pool")
DEFAULT_ENGINES = ENGINES[:3]
SHORT = {"onnxruntime": "ort", "torch_eager": "torch"}


@dataclass
class Row:
    model: str
    family: str
    batch: int
    threads: int
    gflop: float
    build_s: dict[str, float] = field(default_factory=dict)
    median_ms: dict[str, float] = field(default_factory=dict)
    p90_ms: dict[str, float] = field(default_factory=dict)
    max_diff_vs_ort: dict[str, float] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)  # engine -> why it did not run
    host_groups: int = 0  # Kiln's groups that run on the host (Python) instead of compiled: a gap by themselves


def build_model(name: str, batch: int, tiny: bool):
    from kiln.models.wide import wide_model

    entry = wide_model(name)
    return (entry.tiny if tiny else entry.build)(batch)


def make_runner(engine: str, model, threads: int, opt_level: int):
    """A no-argument function running `model` once on `engine` with fixed feeds, returning its outputs, and
    what the build says of itself (Kiln: its host groups)."""
    from kiln.models.wide import wide_feeds

    feeds = wide_feeds(model)
    if engine in ("kiln", "kiln_pool"):
        import kiln
        from kiln.target import Target

        target = dataclasses.replace(Target.host(), threading="kiln") if engine == "kiln_pool" else None
        sess = kiln.InferenceSession(kiln.build(kiln.from_onnx(model), target=target, opt_level=opt_level),
                                     threads=threads)
        return (lambda: sess.run(None, feeds)), {"host_groups": len(sess.model.host_groups)}
    if engine == "onnxruntime":
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        return (lambda: sess.run(None, feeds)), {}
    try:
        from torch_eager import EagerReplay
    except ImportError:
        raise NotImplementedError("torch is not installed (pip install torch==2.13.0)") from None
    eager = EagerReplay(model, threads)
    return (lambda: eager.run(feeds)), {}


def worker(args: argparse.Namespace) -> None:
    """One engine on one model: build, save the first outputs, then answer `turn N` with N timings."""
    from kiln.bench import settle

    t0 = time.perf_counter()
    try:
        run, about = make_runner(args.worker, build_model(args.model, args.batch, args.tiny), args.threads,
                                 args.opt_level)
        outs = run()
    except Exception as e:  # any failure to build or run is this engine's n/a cell, with its reason
        print(json.dumps({"error": f"{type(e).__name__}: {e}"[:300]}), flush=True)
        return
    np.savez(args.outputs, *[np.asarray(o) for o in outs])
    print(json.dumps({"build_s": time.perf_counter() - t0, **about}), flush=True)
    for line in sys.stdin:
        times = []
        settle(run)
        for _ in range(int(line.split()[1])):
            t = time.perf_counter()
            run()
            times.append(time.perf_counter() - t)
        print(json.dumps({"times": times}), flush=True)


class WorkerDied(RuntimeError):
    def __init__(self, engine: str, message: str):
        super().__init__(message)
        self.engine = engine


class Worker:
    """The parent's handle on one engine's worker process; stopped except during its turns."""

    def __init__(self, engine: str, args: argparse.Namespace, name: str, batch: int, threads: int, tmp: str):
        self.engine, self.times = engine, []
        self.outputs = os.path.join(tmp, f"{engine}.npz")
        cmd = [sys.executable, __file__, "--worker", engine, "--models", name, "--batch", str(batch), "--threads",
               str(threads), "--opt-level", str(args.opt_level), "--outputs", self.outputs] + (
            ["--tiny"] if args.tiny else [])
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.ready = self.reply() or {"error": f"the worker died while building (exit {self.proc.wait()})"}
        if "error" not in self.ready:
            self.proc.send_signal(signal.SIGSTOP)

    def reply(self) -> dict | None:
        """The worker's next JSON line (lines a library printed are skipped); None once it has died."""
        for line in self.proc.stdout:
            if line.startswith("{"):
                return json.loads(line)
        return None

    def turn(self, runs: int) -> None:
        self.proc.send_signal(signal.SIGCONT)
        self.proc.stdin.write(f"turn {runs}\n")
        self.proc.stdin.flush()
        answer = self.reply()
        if answer is None:
            raise WorkerDied(self.engine, f"its worker died during a turn (exit {self.proc.wait()})")
        self.times += answer["times"]
        self.proc.send_signal(signal.SIGSTOP)

    def close(self) -> None:
        self.proc.send_signal(signal.SIGCONT)
        self.proc.stdin.close()
        self.proc.wait()


def take_turns(workers: list[Worker], runs: int, burst: int, deadline_s: float) -> None:
    """Turns of `burst` timed runs until every worker has `runs` (or, after 5 turns, the deadline passed)."""
    t_end, turns = time.perf_counter() + deadline_s, 0
    while workers and min(len(w.times) for w in workers) < runs:
        for w in workers:
            w.turn(min(burst, max(1, runs - len(w.times))))
        turns += 1
        if turns >= 5 and time.perf_counter() > t_end:
            break


def max_diff(path: str, ref: list[np.ndarray]) -> float:
    with np.load(path) as z:
        outs = [z[f"arr_{i}"] for i in range(len(z.files))]
    if [o.shape for o in outs] != [r.shape for r in ref]:
        return math.inf
    return max((float(np.max(np.abs(o.astype(np.float64) - r))) for o, r in zip(outs, ref) if r.size), default=0.0)


def measure(name: str, batch: int, threads: int, args: argparse.Namespace) -> Row:
    import kiln
    from kiln.compiler.flop_count import flop_count
    from kiln.models.wide import wide_model

    model = build_model(name, batch, args.tiny)
    row = Row(name, wide_model(name).family, batch, threads, flop_count(kiln.from_onnx(model)) / 1e9)
    with tempfile.TemporaryDirectory() as tmp:
        started = [Worker(e, args, name, batch, threads, tmp) for e in args.engines]
        workers = []
        for w in started:
            if "error" in w.ready:
                row.unavailable[w.engine] = w.ready["error"]
                w.proc.wait()
            else:
                row.build_s[w.engine] = w.ready["build_s"]
                row.host_groups += w.ready.get("host_groups", 0)
                workers.append(w)
        try:
            take_turns(workers, args.runs, args.burst, args.deadline)
        except WorkerDied as e:  # the others' times are kept; this engine's cell is n/a
            row.unavailable[e.engine] = str(e)
            workers = [w for w in workers if w.engine != e.engine]
        finally:
            for w in workers:
                w.close()
        by_engine = {w.engine: w for w in workers}
        ref = by_engine.get("onnxruntime")
        ref_outs = None if ref is None else np.load(ref.outputs)
        for w in workers:
            if not w.times:  # a turn of another engine failed before this one's first
                row.unavailable[w.engine] = "no timed run"
                continue
            row.median_ms[w.engine] = float(np.median(w.times)) * 1e3
            row.p90_ms[w.engine] = float(np.percentile(w.times, 90)) * 1e3
            if ref_outs is not None:
                row.max_diff_vs_ort[w.engine] = max_diff(w.outputs, [ref_outs[f] for f in ref_outs.files])
    return row


def ratio(row: Row, engine: str) -> float:
    ort = row.median_ms.get("onnxruntime")
    return row.median_ms[engine] / ort if ort and engine in row.median_ms else math.nan


def geomean(values: list[float]) -> float:
    values = [v for v in values if math.isfinite(v)]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else math.nan


def cell(value: float, spec: str) -> str:
    return format(value, spec) if math.isfinite(value) else "n/a"


def summary(group: list[Row], engine: str, batch: int, threads: int) -> str:
    ks = [ratio(r, engine) for r in group]
    worst = max(group, key=lambda r: ratio(r, engine) if math.isfinite(ratio(r, engine)) else -1.0)
    return (f"batch {batch}, {threads} threads: geomean {engine}/ort {geomean(ks):.2f}, {sum(k > 1.0 for k in ks)} "
            f"of {len(ks)} above 1.0, worst {worst.model} {ratio(worst, engine):.2f}")


def markdown(rows: list[Row], peak: dict[str, float]) -> str:
    """The table: one line per model, batch and threads; geomeans per batch and threads; the n/a reasons."""
    engines = [e for e in ENGINES if any(e in r.median_ms or e in r.unavailable for r in rows)]
    versus = [e for e in engines if e != "onnxruntime"]
    head = [f"{SHORT.get(e, e)} ms" for e in engines] + [f"{SHORT.get(e, e)}/ort" for e in versus]
    lines = ["| model | family | batch | threads | " + " | ".join(head) + " | GFLOP/s | % peak |",
             "|" + "---|" * (6 + len(head))]
    for r in rows:
        ms = [f"{r.median_ms[e]:.3f}" if e in r.median_ms else "n/a" for e in engines]
        gf = r.gflop / (r.median_ms["kiln"] * 1e-3) if "kiln" in r.median_ms else math.nan
        p = peak.get(f"fma_peak_gflops_{r.threads}t") or max(peak.values(), default=math.nan)
        cells = [cell(ratio(r, e), ".2f") for e in versus] + [cell(gf, ".1f"), cell(100 * gf / p, ".1f") + "%"]
        lines.append(f"| {r.model} | {r.family} | {r.batch} | {r.threads} | {' | '.join(ms + cells)} |")
    lines.append("")
    for b, t in dict.fromkeys((r.batch, r.threads) for r in rows):
        group = [r for r in rows if (r.batch, r.threads) == (b, t)]
        lines += [summary(group, e, b, t) for e in versus if e.startswith("kiln")]
    reasons = {(r.model, e): why for r in rows for e, why in r.unavailable.items()}
    lines += [f"- n/a: {e} on {m}: {why}" for (m, e), why in reasons.items()]
    lines += list(dict.fromkeys(f"- kiln runs {r.host_groups} group(s) of {r.model} on the host" for r in rows
                                if r.host_groups))
    return "\n".join(lines)


def main() -> None:
    from kiln.models.wide import WIDE

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=list(WIDE), choices=list(WIDE))
    p.add_argument("--families", nargs="+", help="only the models of these families (kiln.models.wide)")
    p.add_argument("--engines", nargs="+", default=list(DEFAULT_ENGINES), choices=ENGINES,
                   help="kiln_pool: Kiln on its own thread pool (-threading=kiln) beside the default build")
    p.add_argument("--batch", nargs="+", type=int, default=[1, 8])
    p.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    p.add_argument("--runs", type=int, default=20, help="timed runs per engine")
    p.add_argument("--burst", type=int, default=5, help="timed runs per turn (after 100 ms of untimed runs)")
    p.add_argument("--deadline", type=float, default=60.0, help="seconds per model after which turns stop (>= 5)")
    p.add_argument("--opt-level", type=int, default=3)
    p.add_argument("--tiny", action="store_true", help="the tiny variants: a quick check that everything runs")
    p.add_argument("--json", help="write every number here")
    p.add_argument("--markdown", help="write the table here")
    p.add_argument("--worker", choices=ENGINES, help=argparse.SUPPRESS)
    p.add_argument("--outputs", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        args.model, args.batch, args.threads = args.models[0], args.batch[0], args.threads[0]
        return worker(args)
    if args.runs < 1 or args.burst < 1:
        p.error(f"--runs and --burst must be >= 1, got {args.runs} and {args.burst}")
    names = [n for n in args.models if not args.families or WIDE[n].family in args.families]
    if not names:
        p.error(f"no model of families {args.families}; the families are {sorted({m.family for m in WIDE.values()})}")
    run_all(names, args)


def run_all(names: list[str], args: argparse.Namespace) -> None:
    from bench_models import peaks

    peak = peaks()
    print("machine: " + ", ".join(f"{k} {v:.1f}" for k, v in peak.items()), flush=True)
    rows = []
    for name in names:
        for b in args.batch:
            for t in args.threads:
                row = measure(name, b, t, args)
                print(f"  {name} batch {b} threads {t}: " + ", ".join(f"{k} {v:.3f} ms" for k, v in
                                                                        row.median_ms.items()), flush=True)
                rows.append(row)
                write(args, rows, peak)
    print(markdown(rows, peak))


def write(args: argparse.Namespace, rows: list[Row], peak: dict[str, float]) -> None:
    """After every model, so that a long run stopped early keeps what it measured."""
    for path, text in ((args.json, lambda: json.dumps({"peak": peak, "rows": [asdict(r) for r in rows]}, indent=2)),
                       (args.markdown, lambda: markdown(rows, peak) + "\n")):
        if path:
            tmp = Path(path + ".tmp")
            tmp.write_text(text())
            os.replace(tmp, path)


if __name__ == "__main__":
    main()
