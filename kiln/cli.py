"""The `kiln` command: compile, run, bench, tune, show, demo.

User mistakes (bad file, unsupported op, wrong input) print the error message, not a traceback,
and exit with status 2.
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import sys
import zlib
from collections.abc import Sequence

import numpy as np

from kiln.errors import InputError, KilnError


def _parse_kv(items: Sequence[str], what: str) -> dict[str, str]:
    out = {}
    for it in items or ():
        if "=" not in it:
            raise InputError(f"{what} '{it}' must look like NAME=VALUE")
        k, v = it.split("=", 1)
        out[k] = v
    return out


def random_feeds(mod, given: dict[str, np.ndarray], dims: dict[str, int], seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs of the declared shapes for inputs not given; symbolic dims come from `dims`."""
    from kiln.ir import dtype as dt
    from kiln.ir.types import SizeVar, TensorType

    rng = np.random.default_rng(seed)
    feeds = dict(given)
    for p in mod.main.params:
        if p.name in feeds:
            continue
        t = p.type
        if not isinstance(t, TensorType) or t.shape is None:
            raise InputError(f"input '{p.name}' has type {t}; give it with --input {p.name}=FILE.npy")
        shape = []
        for d in t.shape:
            if isinstance(d, SizeVar):
                if d.name not in dims:
                    raise InputError(f"input '{p.name}' has symbolic dim '{d.name}'; give its size with "
                                     f"--dim {d.name}=VALUE (or the input with --input)")
                shape.append(dims[d.name])
            else:
                shape.append(d)
        npdt = dt.to_numpy(t.dtype)
        if t.dtype == "bool":
            arr = rng.random(shape) < 0.5
        elif t.dtype == "string":
            arr = np.full(shape, "kiln", dtype=object)
        elif dt.is_float(t.dtype) or t.dtype.startswith("complex"):
            arr = rng.standard_normal(shape).astype(npdt)
        else:
            arr = rng.integers(0, 8, size=shape).astype(npdt)
        feeds[p.name] = arr
    return feeds


def checksum(a: np.ndarray) -> str:
    a = np.asarray(a)
    if a.dtype == object:
        return f"crc32={zlib.crc32(repr(a.tolist()).encode()):08x}"
    total = float(np.sum(a.astype(np.float64))) if a.size and a.dtype.kind in "biufc" else 0.0
    return f"sum={total:.6g} crc32={zlib.crc32(np.ascontiguousarray(a).tobytes()):08x}"


def save_atomic(path: str, arr: np.ndarray) -> None:
    """Write an .npy file so that a reader never sees it half-written."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        np.save(f, arr, allow_pickle=False)
    os.replace(tmp, path)


def safe_filename(name: str) -> str:
    clean = "".join(c if c.isalnum() or c in "-_." else "_" for c in name).lstrip(".")
    return clean or "output"


def _parse_dims(items: Sequence[str]) -> dict[str, int]:
    dims = {}
    for k, v in _parse_kv(items, "--dim").items():
        if not v.isdigit():
            raise InputError(f"--dim {k}={v}: the size must be a non-negative integer")
        dims[k] = int(v)
    return dims


def _runner(args: argparse.Namespace):
    """(module whose main gives the inputs, output names, feeds -> outputs) for `kiln run`."""
    import kiln

    if os.path.isdir(args.model):
        if args.records:
            raise InputError(f"--records applies when compiling; {args.model} is already compiled")
        sess = kiln.load(args.model)
        return sess.model.mod, [o.name for o in sess.model.outputs], functools.partial(sess.run, None)
    mod = kiln.from_onnx(args.model)
    compiled = args.executor == "compiled" or args.records  # tuning records only mean something compiled
    run = kiln.build(mod, records=args.records).run if compiled else functools.partial(kiln.evaluate, mod)
    return mod, list(mod.output_names), run


def cmd_run(args: argparse.Namespace) -> int:
    mod, names, run = _runner(args)
    given = {}
    for name, path in _parse_kv(args.input, "--input").items():
        if name not in mod.input_names:
            raise InputError(f"--input names '{name}', but the model's inputs are {', '.join(mod.input_names)}")
        try:
            given[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise InputError(f"--input {name}={path}: cannot read .npy file ({e})") from None
    feeds = random_feeds(mod, given, _parse_dims(args.dim), args.seed)
    outs = run(feeds)
    if args.output_dir:
        os.makedirs(args.output_dir, exist_ok=True)
    for name, val in zip(names, outs):
        if isinstance(val, list):
            print(f"{name}: sequence of {len(val)} tensors")
            continue
        if val is None:
            print(f"{name}: empty optional")
            continue
        val = np.asarray(val)
        print(f"{name}: shape={tuple(val.shape)} dtype={val.dtype} {checksum(val)}")
        if args.output_dir:
            save_atomic(os.path.join(args.output_dir, safe_filename(name) + ".npy"), val)
    return 0


def op_counts(mod) -> collections.Counter:
    from kiln.ir.expr import Call, Op
    from kiln.ir.visitor import post_order

    counts: collections.Counter = collections.Counter()
    for fn in mod.functions.values():
        for e in post_order(fn):
            if isinstance(e, Call) and isinstance(e.op, Op):
                counts[e.op.name] += 1
    return counts


def write_atomic(path: str, text: str) -> None:
    """Write a text file so that a reader never sees it half-written."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def cmd_show(args: argparse.Namespace) -> int:
    import kiln
    from kiln.ir.module import param_bytes
    from kiln.transform import PassContext, PassTiming, PrintIR
    from kiln.transform.pipeline import optimize

    if os.path.isdir(args.model):
        return show_compiled(args.model)
    mod = kiln.from_onnx(args.model)
    if args.passes:
        args.opt_level = 2 if args.opt_level is None else args.opt_level
        timing = PassTiming()
        with PassContext(opt_level=args.opt_level, instruments=[PrintIR(), timing]) as ctx:
            mod = optimize(mod, args.opt_level, ctx)
        print(timing.table())
    elif args.graph or args.opt_level is not None:
        mod = optimize(mod, args.opt_level if args.opt_level is not None else 2)
    if args.graph:
        from kiln.ir.draw import to_html, to_svg

        if not args.graph.endswith((".svg", ".html")):
            raise InputError(f"--graph {args.graph}: the file name must end in .svg or .html")
        page = to_svg(mod) if args.graph.endswith(".svg") else to_html(mod, os.path.basename(args.model))
        write_atomic(args.graph, page)
        print(f"wrote {args.graph}")
        return 0
    if args.passes:
        return 0
    if args.stats:
        counts = op_counts(mod)
        print(f"inputs:  {', '.join(f'{p.name}: {p.type}' for p in mod.main.params)}")
        print(f"outputs: {', '.join(mod.output_names)}")
        print(f"operators: {sum(counts.values())} calls of {len(counts)} kinds")
        for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
            print(f"  {name:32s} {n}")
        print(f"parameters: {param_bytes(mod):,} bytes")
    else:
        print(kiln.ir.text(mod))
    return 0


def show_compiled(directory: str) -> int:
    """What a directory made by `kiln compile` holds: its target (and how it differs from this machine)."""
    from kiln.runtime import artifact
    from kiln.target import Target

    meta = artifact.read_metadata(directory)
    target = artifact.artifact_target(meta, directory)
    print(f"compiled model: {directory} ({meta.get('built_with')} executor, opt_level {meta.get('opt_level')}, "
          f"{len(meta['kernels'])} kernels)")
    print(f"target: {target}")
    if target != Target.host():
        print(f"host:   {Target.host()}")
    note = target.cores_note()
    if note is not None:
        print(f"note: {note}")
    for kind in ("inputs", "outputs"):
        print(f"{kind}: " + ", ".join(f"{t['name']} {t['shape']} {t['dtype']}" for t in meta.get(kind, [])))
    return 0


def cmd_compile(args: argparse.Namespace) -> int:
    import time

    import kiln
    from kiln.build import fix_dims
    from kiln.frontend.onnx import load_model

    t0 = time.perf_counter()
    model = load_model(args.model)
    dims = _parse_dims(args.dim)
    if dims:
        model = fix_dims(model, dims)
    target = kiln.Target.parse(args.target)
    print(f"compiling {args.model} (opt_level {args.opt_level}) for {target}")
    compiled = kiln.build(model, target, opt_level=args.opt_level, executor=args.executor, records=args.records,
                          progress=lambda line: print(f"  {line}", flush=True))
    t1 = time.perf_counter()
    out = compiled.export(args.output)
    print(f"  {'export':8s} {(time.perf_counter() - t1) * 1e3:9.1f} ms  {out}")
    if compiled.host_groups:
        print(f"{len(compiled.host_groups)} fused group(s) run on the host (fix symbolic dims with --dim to "
              f"compile more):")
        for why in compiled.host_groups:
            print(f"  {why}")
    print(f"done in {time.perf_counter() - t0:.2f} s: {compiled.executor} executor, "
          f"{compiled.report.kernels} kernels; run it with `kiln run {out}`")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from kiln.bench import bench

    bench(args.model, _parse_dims(args.dim), args.threads, args.runs, args.warmup, args.opt_level, args.seed,
          records=args.records, burst=args.burst)
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    from kiln.tune.command import run_tune

    return run_tune(args.model, _parse_dims(args.dim), args.records, trials=args.trials, threads=args.threads,
                    timeout=args.timeout, batch=args.batch, opt_level=args.opt_level, seed=args.seed,
                    check_rounds=args.check_rounds)


def cmd_demo(args: argparse.Namespace) -> int:
    from kiln.demo import run_demo

    return run_demo()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kiln", description="Kiln: a deep-learning compiler and runtime.")
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("compile", help="compile a model into a directory that `kiln run` loads",
                       description="Import, optimize, lower and compile MODEL.onnx, then save the library, "
                                   "graph and weights to DIR.")
    c.add_argument("model", help="path to an .onnx file")
    c.add_argument("-o", "--output", required=True, metavar="DIR", help="where to write the compiled model")
    c.add_argument("--opt-level", type=int, choices=range(4), default=2, metavar="{0,1,2,3}",
                   help="graph optimization level (default 2)")
    c.add_argument("--dim", action="append", metavar="NAME=VALUE", help="fix a symbolic dim to a size")
    c.add_argument("--executor", choices=("auto", "aot", "graph"), default="auto",
                   help="AOT (static shapes) or kernel by kernel; default: AOT where it applies")
    c.add_argument("--records", metavar="FILE", help="schedule kernels with the best configs of a `kiln tune` log")
    c.add_argument("--target", metavar="STRING", default=None,
                   help='the machine to build for, e.g. "c -cores=4" or "c -features=avx,avx2,fma -vector-bits=256" '
                        '(options left out are this machine\'s; default: this machine; '
                        '`python -c "import kiln; print(kiln.Target.host())"` prints it)')
    c.set_defaults(fn=cmd_compile)

    r = sub.add_parser("run", help="run a model on given or random inputs",
                       description="Run MODEL.onnx or a compiled DIR and print each output's name, shape, "
                                   "dtype and checksum.")
    r.add_argument("model", help="path to an .onnx file, or a directory made by `kiln compile`")
    r.add_argument("--executor", choices=("interpreter", "compiled"), default="interpreter",
                   help="for an .onnx file: the reference interpreter (default) or compile it first")
    r.add_argument("--input", action="append", metavar="NAME=FILE.npy", help="an input from a .npy file")
    r.add_argument("--dim", action="append", metavar="NAME=VALUE", help="size of a symbolic dim for random inputs")
    r.add_argument("--output-dir", metavar="DIR", help="write each output as DIR/NAME.npy")
    r.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    r.add_argument("--records", metavar="FILE", help="compile with the best configs of a `kiln tune` log "
                   "(implies --executor compiled)")
    r.set_defaults(fn=cmd_run)

    b = sub.add_parser("bench", help="time Kiln, ONNX Runtime and the interpreter on a model",
                       description="Time MODEL.onnx on random inputs with Kiln (compiled), ONNX Runtime (if "
                                   "installed) and the reference interpreter, taking turns.")
    b.add_argument("model", help="path to an .onnx file")
    b.add_argument("--threads", type=int, default=None, help="threads for Kiln and ONNX Runtime "
                   "(default: all cores)")
    b.add_argument("--runs", type=int, default=20, help="timed runs per engine (default 20)")
    b.add_argument("--warmup", type=int, default=3, help="untimed runs per engine first (default 3)")
    b.add_argument("--burst", type=int, default=5, help="timed runs per turn; each turn starts with 20 ms "
                   "of untimed runs so that the previous engine's spinning threads do not count (default 5)")
    b.add_argument("--dim", action="append", metavar="NAME=VALUE", help="size of a symbolic dim (default 1)")
    b.add_argument("--opt-level", type=int, choices=range(4), default=2, metavar="{0,1,2,3}",
                   help="Kiln's graph optimization level (default 2)")
    b.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    b.add_argument("--records", metavar="FILE", help="also time Kiln built with the best configs of a "
                   "`kiln tune` log, next to the untuned build")
    b.set_defaults(fn=cmd_bench)

    t = sub.add_parser("tune", help="search kernel schedules for a model and log the fastest",
                       description="Find the tunable fused groups of MODEL.onnx, measure schedule candidates "
                                   "chosen by a learned cost model, and append every measurement to a records "
                                   "file that `kiln compile/run/bench --records` apply.")
    t.add_argument("model", help="path to an .onnx file")
    t.add_argument("--records", required=True, metavar="FILE", help="JSON-lines log to append to (resumes "
                   "from what it already holds)")
    t.add_argument("--trials", type=int, default=64, help="measurements in all, over every task (default 64; 0: "
                   "only check the records' picks in the model)")
    t.add_argument("--check-rounds", type=int, default=None, help="after tuning, time the model with and without "
                   "the picks, a run of each this many times, and reject picks not faster there (default 80; 0: no "
                   "check)")
    t.add_argument("--threads", type=int, default=None, help="threads kernels run with while measured "
                   "(default: all cores)")
    t.add_argument("--timeout", type=float, default=10.0, help="seconds one candidate may take before it "
                   "counts as failed (default 10)")
    t.add_argument("--batch", type=int, default=8, help="candidates compiled and measured together (default 8)")
    t.add_argument("--dim", action="append", metavar="NAME=VALUE", help="size of a symbolic dim (default 1)")
    t.add_argument("--opt-level", type=int, choices=range(4), default=2, metavar="{0,1,2,3}",
                   help="graph optimization level, as for the builds that will use the records (default 2)")
    t.add_argument("--seed", type=int, default=0, help="seed of the search (default 0)")
    t.set_defaults(fn=cmd_tune)

    s = sub.add_parser("show", help="print the model's IR", description="Print the IR text of MODEL.onnx, or what a "
                       "directory made by `kiln compile` was built for.")
    s.add_argument("model", help="path to an .onnx file, or a directory made by `kiln compile`")
    s.add_argument("--stats", action="store_true", help="operator counts and parameter bytes instead of the IR")
    s.add_argument("--passes", action="store_true", help="run the standard pipeline, printing the IR after "
                   "each pass and a timing table")
    s.add_argument("--opt-level", type=int, choices=range(4), default=None, metavar="{0,1,2,3}",
                   help="optimize at this level first (default for --passes and --graph: 2)")
    s.add_argument("--graph", metavar="OUT.svg|OUT.html", help="draw the (optimized) graph: fused groups as "
                   "boxes, tensor shapes on edges")
    s.set_defaults(fn=cmd_show)

    d = sub.add_parser("demo", help="take a built-in CNN through every stage of Kiln",
                       description="Build a small CNN from code (fixed-seed weights) and take it through "
                                   "every stage Kiln has, printing what each did.")
    d.set_defaults(fn=cmd_demo)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except KilnError as e:
        print(f"kiln {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
