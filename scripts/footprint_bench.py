"""Issue 35's footprint goals, measured in whole processes (run it on a quiet machine).

(a) build + runs: per model, one process builds a session from the ONNX file and runs it `--runs` times;
    its peak resident memory (VmHWM), Kiln vs ONNX Runtime (each in its own process, alternating).
    Goal: Kiln's peak <= ONNX Runtime's.
(b) a compiled artifact (`--artifact MODEL`): one process imports kiln, loads the directory and runs it once;
    the wall time of that (import included), its resident memory after load against weights + arena + 40 MB,
    and a second process loading the same directory while the first holds it: the weight pages it adds
    (private bytes of weights.bin in /proc/PID/smaps) and its PSS for the file. Also the load with
    verify_weights=False, which is what the crc32 check costs.
    Goals: load + first run <= 0.3 s, RSS after load <= weights + arena + 40 MB, no added weight pages.

    PYTHONPATH=$PWD python scripts/footprint_bench.py       # resnet18, resnet50, bert, mobilenet_v2, mlp
    PYTHONPATH=$PWD python scripts/footprint_bench.py --models mlp --artifact mlp --runs 5   # a quick check
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MB = 1 << 20
BUDGET = 40 * MB  # RSS after load may exceed weights + arena by this much (issue 35)


def _process_memory():
    """kiln.runtime.process_memory loaded from its file, so a child measuring ONNX Runtime imports no Kiln."""
    spec = importlib.util.spec_from_file_location("process_memory", ROOT / "kiln/runtime/process_memory.py")
    mod = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _model(name: str):
    from kiln import models

    makers = {"resnet50": lambda: models.resnet50(batch=1), "resnet18": lambda: models.resnet18(batch=1),
              "bert": lambda: models.bert(batch=1),
              "mobilenet_v2": lambda: models.mobilenet_v2(batch=1), "mlp": lambda: models.mlp(batch=1),
              "small_cnn": lambda: models.small_cnn(batch=1)}
    if name not in makers:
        sys.exit(f"unknown model {name!r}; one of {', '.join(makers)}")
    return makers[name]()


def _write_model(name: str, where: Path) -> tuple[Path, Path]:
    """The model as an .onnx file and random inputs as an .npz (so no child needs Kiln to make them)."""
    import numpy as np
    import onnx

    import kiln
    from kiln.feeds import random_feeds

    model = _model(name)
    path, feeds = where / f"{name}.onnx", where / f"{name}.feeds.npz"
    onnx.save(model, path)
    np.savez(feeds, **random_feeds(kiln.from_onnx(model), {}, {}))
    return path, feeds


def _child(argv: list[str]) -> dict:
    """Run this script as a child process with `argv`; its one line of JSON, with the whole process's wall time
    (interpreter start and exit included) as "process_s"."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, __file__, "--child", *argv], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"child {argv} failed:\n{out.stderr[-3000:]}")
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "process_s": time.perf_counter() - t0}


def child_build_and_run(engine: str, model: str, feeds: str, runs: int) -> dict:
    """(a): build a session from the file, run it `runs` times; peak resident bytes and seconds."""
    import numpy as np

    pm = _process_memory()
    t0 = time.perf_counter()
    inputs = dict(np.load(feeds))
    if engine == "kiln":
        import kiln

        sess = kiln.InferenceSession(model)
    else:
        import onnxruntime as ort

        sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    built = time.perf_counter() - t0
    for _ in range(runs):
        sess.run(None, inputs)
    return {"peak": pm.peak_resident_bytes(), "build_s": built, "total_s": time.perf_counter() - t0}


def child_load(directory: str, feeds: str, verify: bool, hold: bool) -> dict:
    """(b): import kiln, load the artifact, run once; seconds, resident bytes, the weight file's pages.
    With `hold`, print the result and wait for a line on stdin (the second process loads meanwhile)."""
    t0 = time.perf_counter()
    import kiln

    sess = kiln.load(directory, verify_weights=verify)
    loaded = time.perf_counter() - t0
    pm = _process_memory()
    rss_load = pm.resident_bytes()
    import numpy as np

    sess.run(None, dict(np.load(feeds)))
    first_run = time.perf_counter() - t0
    fp = sess.model.footprint()
    pages = pm.file_pages(Path(directory) / "weights.bin")
    out = {"load_s": loaded, "load_and_run_s": first_run, "rss_after_load": rss_load,
           "rss_after_run": pm.resident_bytes(), "packed_weights": fp.packed_weights_bytes,
           "arena": fp.arena_bytes, "weight_pages": None if pages is None else vars(pages)}
    if hold:
        print(json.dumps(out), flush=True)
        sys.stdin.readline()
    return out


def build_and_run(models: list[str], runs: int, where: Path) -> None:
    print(f"(a) peak RSS of a process that builds a session from the ONNX file and runs it {runs} times")
    print(f"{'model':14s} {'kiln MB':>9s} {'ort MB':>9s} {'ratio':>7s} {'kiln build s':>13s} {'ort build s':>12s}")
    for name in models:
        path, feeds = _write_model(name, where)
        kiln_r = _child(["build", "kiln", str(path), str(feeds), str(runs)])
        ort_r = _child(["build", "ort", str(path), str(feeds), str(runs)])
        print(f"{name:14s} {kiln_r['peak'] / MB:9.1f} {ort_r['peak'] / MB:9.1f} {kiln_r['peak'] / ort_r['peak']:7.2f} "
              f"{kiln_r['build_s']:13.2f} {ort_r['build_s']:12.2f}", flush=True)


def artifact(name: str, where: Path) -> None:
    import kiln

    path, feeds = _write_model(name, where)
    directory = kiln.build(str(path)).export(where / f"{name}.kiln")
    print(f"(b) the compiled artifact of {name} ({directory})")
    for verify in (True, False):
        r = _child(["load", str(directory), str(feeds), str(int(verify))])
        print(f"  verify_weights={verify!s:5s}: import + load {r['load_s']:.3f} s, + first run "
              f"{r['load_and_run_s']:.3f} s (goal <= 0.3 s); the whole process {r['process_s']:.3f} s")
    limit = r["packed_weights"] + r["arena"] + BUDGET
    print(f"  RSS after load {r['rss_after_load'] / MB:.1f} MB, after a run {r['rss_after_run'] / MB:.1f} MB; "
          f"weights + arena + 40 MB = {limit / MB:.1f} MB: {'met' if r['rss_after_load'] <= limit else 'NOT met'}")
    _second_process(directory, feeds)


def _second_process(directory: Path, feeds: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    first = subprocess.Popen([sys.executable, __file__, "--child", "hold", str(directory), str(feeds), "1"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        json.loads(first.stdout.readline())
        second = _child(["load", str(directory), str(feeds), "1"])
        pages = second["weight_pages"]
        if pages is None:
            print("  second process: no /proc/PID/smaps here, pages not measured")
            return
        print(f"  second process, weights.bin: {pages['rss'] / MB:.1f} MB resident, {pages['private'] / MB:.2f} MB "
              f"private (added weight pages; goal 0), PSS {pages['pss'] / MB:.1f} MB")
    finally:
        first.communicate("\n")


def main(argv: list[str]) -> None:
    if argv and argv[0] == "--child":
        kind, rest = argv[1], argv[2:]
        if kind == "build":
            result = child_build_and_run(rest[0], rest[1], rest[2], int(rest[3]))
        else:
            result = child_load(rest[0], rest[1], rest[2] == "1", kind == "hold")
        print(json.dumps(result))
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="resnet18,resnet50,bert,mobilenet_v2,mlp",
                   help="comma-separated (also small_cnn)")
    p.add_argument("--runs", type=int, default=45)
    p.add_argument("--artifact", default="resnet50", help="the model whose compiled artifact (b) loads")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kiln-footprint-") as tmp:
        if args.models:
            build_and_run(args.models.split(","), args.runs, Path(tmp))
        if args.artifact:
            artifact(args.artifact, Path(tmp))


if __name__ == "__main__":
    main(sys.argv[1:])
