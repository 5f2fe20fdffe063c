"""Run fuzz cases in guarded worker subprocesses and report the split of outcomes.

    python -m tests.fuzz.runner -n 2000 --seed 0 --json fuzz_report.json --save-failures tests/fuzz/regressions

A worker runs a batch of cases under an address-space cap (RLIMIT_AS) and says "start" before each
case and the result after it; the supervisor gives each case a time cap. A worker that dies in a
case records a crash, one that falls silent past the cap a hang (it is killed); either way a fresh
worker takes the remaining cases.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable

from tests.fuzz.case import EXECUTORS, Case, Result

MEMORY_CAP = 4 << 30
TIME_CAP = 60.0
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def plant(kind: str) -> None:
    """Replace the case's run by a planted failure, so the tests can show that each kind is caught."""
    import signal

    from tests.fuzz import case

    def planted(path: str, executor: str, result: Result) -> None:
        if kind == "crash":
            os.kill(os.getpid(), signal.SIGSEGV)
        if kind == "hang":
            time.sleep(3600)
        raise ZeroDivisionError("planted")

    case.execute = planted


def worker_main(memory_cap: int, planted: str = "") -> None:
    """Read cases (JSON lines) from stdin; print `start N` then the result's JSON for each."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (memory_cap, memory_cap))
    from tests.fuzz.case import run_case

    if planted:
        plant(planted)

    for line in sys.stdin:
        case = Case(**json.loads(line))
        print(f"start {case.index}", flush=True)
        workdir = tempfile.mkdtemp(prefix=f"kiln-fuzz-{case.index}-")
        result = run_case(case, workdir)
        shutil.rmtree(workdir, ignore_errors=True)
        print("result " + json.dumps(result.to_dict()), flush=True)


class Worker:
    """One worker subprocess and a thread that queues its stdout lines."""

    def __init__(self, memory_cap: int, planted: str = ""):
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.fuzz.runner", "--worker",
                                      "--memory", str(memory_cap), "--plant", planted], cwd=ROOT, env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def send(self, case: Case) -> None:
        self.proc.stdin.write(json.dumps(case.__dict__) + "\n")
        self.proc.stdin.flush()

    def result(self, time_cap: float) -> dict | str:
        """The case's result dict, or "crash" / "hang"."""
        deadline = time.monotonic() + time_cap + 30.0  # the first case also pays for importing kiln
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return "hang"
            if line is None:
                return "crash"
            if line.startswith("start "):
                deadline = time.monotonic() + time_cap
            elif line.startswith("result "):
                return json.loads(line[len("result "):])

    def stop(self) -> int | None:
        self.proc.kill()
        return self.proc.wait()


def run_cases(cases: Iterable[Case], time_cap: float = TIME_CAP, memory_cap: int = MEMORY_CAP,
              planted: str = "") -> list[Result]:
    """Every case's result, in order; one worker at a time, replaced after a crash or a hang.
    `planted` ("traceback", "crash", "hang") makes every case fail that way (the harness's own tests)."""
    results: list[Result] = []
    worker: Worker | None = None
    for case in cases:
        worker = worker or Worker(memory_cap, planted)
        worker.send(case)
        got = worker.result(time_cap)
        if isinstance(got, dict):
            results.append(Result(**got))
            continue
        status = worker.stop()
        worker = None
        model, mutation, executor = case.plan()
        results.append(Result(case.index, model, mutation, executor, outcome=got,
                              error=f"worker exit status {status}" if got == "crash" else f"no result in {time_cap}s"))
    if worker:
        worker.proc.stdin.close()
        worker.proc.wait()
    return results


def summary(results: list[Result]) -> dict:
    """Counts of outcomes per executor, the size-failure tracebacks, and the compared/disagreeing runs."""
    split = {ex: dict(collections.Counter(r.outcome for r in results if r.executor == ex)) for ex in EXECUTORS}
    return {"cases": len(results), "split": split,
            "total": dict(collections.Counter(r.outcome for r in results)),
            "size_tracebacks": sum(r.outcome == "traceback" and r.size for r in results),
            "compared": sum(r.compared for r in results),
            "disagree": sum(r.compared and r.agree is False for r in results)}


def failures(results: list[Result]) -> list[Result]:
    """Cases that count against Kiln: tracebacks, crashes, hangs and disagreements."""
    return [r for r in results if r.outcome in ("traceback", "crash", "hang") or r.agree is False]


def save_failures(found: list[Result], seed: int, directory: str) -> list[str]:
    """Keep each failing case's model as DIR/<model>-<mutation>-s<seed>-<index>.onnx beside a JSON of
    its expected outcome ("clean": a model that fails must fail with a Kiln error)."""
    os.makedirs(directory, exist_ok=True)
    written = []
    for r in found:
        stem = os.path.join(directory, f"{r.model}-{r.mutation}-s{seed}-{r.index}")
        with open(stem + ".onnx", "wb") as f:
            f.write(Case(r.index, seed).model_bytes())
        expected = "ran" if r.agree is False else "clean"
        note = {"executor": r.executor, "expected": expected, "found": r.outcome, "error": r.error,
                "size": r.size}
        with open(stem + ".json", "w") as f:
            json.dump(note, f, indent=1)
        written.append(stem)
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-n", type=int, default=2000, help="number of cases")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--start", type=int, default=0, help="first case number")
    p.add_argument("--json", default="fuzz_report.json", help="where the report goes")
    p.add_argument("--save-failures", metavar="DIR", help="keep each failing case as a regression file")
    p.add_argument("--time-cap", type=float, default=TIME_CAP)
    p.add_argument("--memory", type=int, default=MEMORY_CAP)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--plant", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker_main(args.memory, args.plant)
        return 0
    start = time.perf_counter()
    results = run_cases((Case(i, args.seed) for i in range(args.start, args.start + args.n)), args.time_cap,
                        args.memory)
    report = summary(results) | {"seconds": round(time.perf_counter() - start, 1), "seed": args.seed}
    print(json.dumps(report, indent=1))
    for r in failures(results):
        print(f"  {r.outcome}{' (size)' if r.size else ''}: case {r.index} {r.model}/{r.mutation}/{r.executor}: "
              f"{r.error} at {r.where}")
    if args.save_failures:
        save_failures(failures(results), args.seed, args.save_failures)
    with open(args.json, "w") as f:
        json.dump(report | {"results": [r.to_dict() for r in results]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
