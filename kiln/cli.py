"""The `kiln` command: compile, run, bench, bench-serve, tune, show, quantize, demo, serve.

User mistakes (bad file, unsupported op, wrong input) print the error message, not a traceback,
and exit with status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from kiln.errors import InputError, KilnError
from kiln.feeds import load_npy, random_feeds
from kiln.summary import checksum, op_counts


def _parse_kv(items: Sequence[str], what: str) -> dict[str, str]:
    out = {}
    for it in items or ():
        if "=" not in it:
            raise InputError(f"{what} '{it}' must look like NAME=VALUE")
        k, v = it.split("=", 1)
        out[k] = v
    return out


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


def _pass_value(text: str) -> int | float | bool | str:
    """A --pass-config value: an int, a float, true/false, else the text itself."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _pass_options(args: argparse.Namespace) -> dict:
    """kiln.build's pass keywords (pass_config, disabled_passes) from --pass-config and --disable-pass.
    A misspelt pass or key is an error here, before any work (PassContext checks the names)."""
    from kiln.transform import PassContext

    config = {k: _pass_value(v) for k, v in _parse_kv(args.pass_config, "--pass-config").items()}
    disabled = tuple(args.disable_pass or ())
    PassContext(disabled=disabled, config=config)
    return {"pass_config": config, "disabled_passes": disabled}


def _runner(args: argparse.Namespace):
    """(module whose main gives the inputs, output names, feeds -> outputs) for `kiln run`."""
    import kiln

    tweaked = args.pass_config or args.disable_pass
    if os.path.isdir(args.model):
        if args.records or tweaked:
            raise InputError(f"--records, --pass-config and --disable-pass apply when compiling; {args.model} is "
                             f"already compiled")
        sess = kiln.load(args.model)
        return sess.model.mod, [o.name for o in sess.model.outputs], functools.partial(sess.run, None)
    passes = _pass_options(args)  # after the compiled case: checking pass names imports the compiler's passes
    if args.executor == "compiled" and not (args.wait or args.records or tweaked or args.target):
        sess = kiln.InferenceSession(args.model, on_status=_status_printer(args.verbose))
        if args.verbose:
            print(f"session: {sess.status}", file=sys.stderr, flush=True)
        return sess.module, [o.name for o in sess.get_outputs()], functools.partial(_run_reporting, sess, args.verbose)
    mod = kiln.from_onnx(args.model)
    if args.target is not None:
        built = kiln.build(mod, args.target, records=args.records, **passes)
        return mod, list(mod.output_names), _with_report(built)
    compiled = args.executor == "compiled" or args.records or tweaked  # these only mean something compiled
    run = kiln.build(mod, records=args.records, **passes).run if compiled else functools.partial(kiln.evaluate, mod)
    return mod, list(mod.output_names), run


def _with_report(model: Any) -> Any:
    """`model.run`, followed on the simulated accelerator by its report (cycles, utilization, effects)."""
    if model.executor != "npu":
        return model.run

    def run(feeds: dict[str, Any]) -> list[Any]:
        import time

        from kiln.npu.run_report import run_report

        t0 = time.perf_counter()
        outs = model.run(feeds)
        print("\n".join(run_report(model, time.perf_counter() - t0)))
        return outs
    return run
def _status_printer(verbose: bool) -> Any:
    """A session's on_status for `kiln run -v`: each change of tier or build progress on stderr."""
    if not verbose:
        return None
    return lambda status: print(f"session: {status}", file=sys.stderr, flush=True)


def _run_reporting(sess: Any, verbose: bool, feeds: dict[str, Any]) -> list:
    """One run of a tiered session, saying (with -v) which tier answered."""
    tier = sess.status.tier
    outs = sess.run(None, feeds)
    if verbose:
        print(f"answered by the {tier} tier", file=sys.stderr, flush=True)
    return outs


def cmd_run(args: argparse.Namespace) -> int:
    mod, names, run = _runner(args)
    given = {}
    for name, path in _parse_kv(args.input, "--input").items():
        if name not in mod.input_names:
            raise InputError(f"--input names '{name}', but the model's inputs are {', '.join(mod.input_names)}")
        given[name] = load_npy(name, path)
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
    passes = _pass_options(args)
    given = {"disabled": passes["disabled_passes"], "config": passes["pass_config"]}
    mod = kiln.from_onnx(args.model)
    if args.passes:
        args.opt_level = 2 if args.opt_level is None else args.opt_level
        timing = PassTiming()
        with PassContext(opt_level=args.opt_level, instruments=[PrintIR(), timing], **given) as ctx:
            mod = optimize(mod, args.opt_level, ctx)
        print(timing.table())
    elif args.graph or args.opt_level is not None:
        level = args.opt_level if args.opt_level is not None else 2
        mod = optimize(mod, level, PassContext(level, **given))
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
    memory = artifact.memory_report(meta)
    if memory is not None:
        print(f"memory: {memory}")
    if "build_profile" in meta:
        from kiln.codegen.build_profile import BuildProfile

        print("build profile (as saved by the build):")
        for line in BuildProfile.from_json(meta["build_profile"]).lines():
            print(f"  {line}")
    print("footprint (loaded and run once here, on random inputs; symbolic dims 1):")
    for line in _measured_footprint(directory).lines():
        print(f"  {line}")
    return 0


def _measured_footprint(directory: str) -> Any:
    """The compiled model's footprint in this process: loaded, then after one run on random inputs."""
    import kiln
    from kiln.runtime.process_memory import resident_bytes

    sess = kiln.load(directory)
    loaded = sess.model.footprint()
    dims = {d: 1 for t in sess.model.inputs for d in t.shape or () if isinstance(d, str)}
    try:
        sess.model.run(random_feeds(sess.model.mod, {}, dims))
    except KilnError as e:  # an input random values cannot stand for (strings, a shape tensor, ...)
        print(f"  (not run on random inputs: {e})")
        return loaded
    return dataclasses.replace(loaded, rss_after_run=resident_bytes())


def cmd_compile(args: argparse.Namespace) -> int:
    import time

    import kiln
    from kiln.compiler.model_dims import fix_dims
    from kiln.frontend.onnx import load_model

    passes = _pass_options(args)
    t0 = time.perf_counter()
    model = load_model(args.model)
    dims = _parse_dims(args.dim)
    if dims:
        model = fix_dims(model, dims)
    target = kiln.Target.parse(args.target)
    print(f"compiling {args.model} (opt_level {args.opt_level}) for {target}")
    memory = {"memory_strategy": args.memory_strategy}
    if args.memory_order_budget is not None:
        memory["memory_order_budget"] = args.memory_order_budget
    compiled = kiln.build(model, target, opt_level=args.opt_level, executor=args.executor, records=args.records,
                          progress=lambda line: print(f"  {line}", flush=True), **passes, **memory)
    t1 = time.perf_counter()
    out = compiled.export(args.output)
    print(f"  {'export':8s} {(time.perf_counter() - t1) * 1e3:9.1f} ms  {out}")
    if args.profile:
        print("build profile:")
        for line in compiled.report.profile.lines():
            print(f"  {line}")
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

    if args.target is not None:
        from kiln.npu.bench import npu_bench

        npu_bench(args.model, args.target, _parse_dims(args.dim), args.runs, args.opt_level, args.seed)
        return 0
    bench(args.model, _parse_dims(args.dim), args.threads, args.runs, args.warmup, args.opt_level, args.seed,
          records=args.records, burst=args.burst, build_options=_pass_options(args))
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    from kiln.tune_command import run_tune

    return run_tune(args.model, _parse_dims(args.dim), args.records, trials=args.trials, threads=args.threads,
                    timeout=args.timeout, batch=args.batch, opt_level=args.opt_level, seed=args.seed,
                    check_rounds=args.check_rounds)


def cmd_quantize(args: argparse.Namespace) -> int:
    from kiln.quantization.command import run_quantize

    return run_quantize(args.model, args.output, args.calibrate, args.method, args.percentile, args.per_channel,
                        args.dynamic, args.report)
def cmd_bench_serve(args: argparse.Namespace) -> int:
    from kiln.serve.bench import VARIANTS, bench_serve
    from kiln.serve.bench_report import report
    from kiln.serve.workloads import ISSUE_WORKLOADS

    report(bench_serve(args.workload or list(ISSUE_WORKLOADS), args.duration, args.seed, args.repeat,
                       tuple(args.variant or VARIANTS)), args.json, args.html)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from kiln.demo import run_demo

    return run_demo()


def cmd_serve(args: argparse.Namespace) -> int:
    from kiln.serve.server import serve

    return serve(args.repo, args.host, args.port, args.scheduler, args.max_body_mb, ray=args.ray)


def _add_pass_flags(p: argparse.ArgumentParser, note: str = "") -> None:
    p.add_argument("--pass-config", action="append", metavar="KEY=VALUE", help="set a graph pass option "
                   "(PassContext.config), e.g. pack_dense.nr=16; the value is read as an int, float, true/false or "
                   f"text; repeatable{note}")
    p.add_argument("--disable-pass", action="append", metavar="NAME", help="do not run this graph pass, e.g. "
                   f"fold-scale-axis; repeatable{note}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kiln", description="Kiln: a deep-learning compiler and runtime.")
    p.add_argument("--cores", type=int, default=None, help="cores of Kiln's thread pool, shared by every model "
                   "the command runs (default: KILN_CORES, else all)")
    p.add_argument("--spin-us", type=int, default=None, help="microseconds an idle pool worker spins before it "
                   "sleeps (default: KILN_SPIN_US, else 25)")
    p.add_argument("--pin", action=argparse.BooleanOptionalAction, default=None, help="pin pool worker i to "
                   "core i (default: KILN_PIN, else no)")
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("compile", help="compile a model into a directory that `kiln run` loads",
                       description="Import, optimize, lower and compile MODEL.onnx, then save the library, "
                                   "graph and weights to DIR.")
    c.add_argument("model", help="path to an .onnx file")
    c.add_argument("-o", "--output", required=True, metavar="DIR", help="where to write the compiled model")
    c.add_argument("--opt-level", type=int, choices=range(4), default=2, metavar="{0,1,2,3}",
                   help="graph optimization level (default 2)")
    c.add_argument("--dim", action="append", metavar="NAME=VALUE", help="fix a symbolic dim to a size")
    c.add_argument("--executor", choices=("auto", "aot", "graph", "dataflow"), default="auto",
                   help="AOT (static shapes), dataflow (AOT kernels, independent branches at once on parts of "
                        "the cores) or kernel by kernel; default: AOT where it applies, dataflow where the "
                        "cost model predicts it wins")
    c.add_argument("--records", metavar="FILE", help="schedule kernels with the best configs of a `kiln tune` log")
    c.add_argument("--memory-strategy", choices=("arena", "counted"), default="arena",
                   help="arena: one planned arena (default); counted: kernels one by one over pool-allocated tensors")
    c.add_argument("--memory-order-budget", type=float, default=None, metavar="SECONDS",
                   help="time the search for the minimum-peak operator order may take (default 3)")
    c.add_argument("--target", metavar="STRING", default=None,
                   help='the machine to build for, e.g. "c -cores=4" or "c -features=avx,avx2,fma -vector-bits=256" '
                        '(options left out are this machine\'s; default: this machine; '
                        '`python -c "import kiln; print(kiln.Target.host())"` prints it)')
    c.add_argument("--profile", action="store_true", help="print where the build's time went: seconds per stage "
                   "and per translation unit, C bytes and estimated gcc seconds per kernel (kept in the directory "
                   "for `kiln show DIR`)")
    _add_pass_flags(c)
    c.set_defaults(fn=cmd_compile)

    r = sub.add_parser("run", help="run a model on given or random inputs",
                       description="Run MODEL.onnx or a compiled DIR and print each output's name, shape, "
                                   "dtype and checksum.")
    r.add_argument("model", help="path to an .onnx file, or a directory made by `kiln compile`")
    r.add_argument("--executor", choices=("interpreter", "compiled"), default="interpreter",
                   help="for an .onnx file: the reference interpreter (default) or compiled: answered at once by "
                        "Kiln's shape-generic kernels while the model's own compile (see --wait)")
    r.add_argument("--wait", action="store_true", help="with --executor compiled: compile the model's kernels "
                   "first and run on them, instead of answering from the generic kernels meanwhile")
    r.add_argument("-v", "--verbose", action="store_true", help="with --executor compiled: print the session's "
                   "tier and the build's progress (kernels compiled / total) on stderr")
    r.add_argument("--input", action="append", metavar="NAME=FILE.npy", help="an input from a .npy file")
    r.add_argument("--dim", action="append", metavar="NAME=VALUE", help="size of a symbolic dim for random inputs")
    r.add_argument("--output-dir", metavar="DIR", help="write each output as DIR/NAME.npy")
    r.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    r.add_argument("--records", metavar="FILE", help="compile with the best configs of a `kiln tune` log "
                   "(implies --executor compiled)")
    r.add_argument("--target", metavar="STRING", default=None, help="compile for this target first (kiln.Target; "
                   "npu-sim: the simulated accelerator, whose report follows the outputs)")
    _add_pass_flags(r, " (implies --executor compiled)")
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
    b.add_argument("--target", metavar="STRING", default=None, help="npu-sim: run on the simulated accelerator "
                   "and report its cycles per kernel, utilization and the effect of each optimization")
    _add_pass_flags(b)
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
    _add_pass_flags(s)
    s.set_defaults(fn=cmd_show)

    q = sub.add_parser("quantize", help="quantize a model to int8 with Kiln's own calibration",
                       description="Write an int8 version of MODEL.onnx that ONNX Runtime and Kiln run: static "
                                   "(QDQ, ranges calibrated on --calibrate DATA) or --dynamic (MatMul/Gemm weights).")
    q.add_argument("model", help="path to an .onnx file")
    q.add_argument("-o", "--output", required=True, metavar="OUT.onnx", help="where to write the quantized model")
    q.add_argument("--calibrate", metavar="DATA", help="a directory of feeds, one run per file (.npz: one array "
                   "per input, keyed by name; .npy: the input of a one-input model), or a number of random feeds")
    q.add_argument("--method", choices=("minmax", "percentile", "entropy"), default="minmax",
                   help="how a tensor's calibrated values become its range (default minmax)")
    q.add_argument("--percentile", type=float, default=99.99, help="for --method percentile (default 99.99)")
    granularity = q.add_mutually_exclusive_group()
    granularity.add_argument("--per-channel", dest="per_channel", action="store_true", default=True,
                             help="a weight scale per output channel (default)")
    granularity.add_argument("--per-tensor", dest="per_channel", action="store_false",
                             help="one scale per weight")
    q.add_argument("--dynamic", action="store_true", help="int8 MatMul/Gemm weights, activations quantized at run "
                   "time (transformers); no calibration needed")
    q.add_argument("--report", metavar="FILE", help="print the error each tensor adds (float vs quantized "
                   "model: SQNR, max error, cosine) and write it as JSON")
    q.set_defaults(fn=cmd_quantize)
    bs = sub.add_parser("bench-serve", help="load the serving scheduler as DISB does and compare it with baselines",
                        description="Run serving workloads (open-loop real-time clients, closed-loop best-effort "
                                    "clients) through the REEF scheduler and its baselines (RT alone, BE alone, one "
                                    "FIFO queue, two OS processes as is, under nice 19 and SCHED_IDLE), taking turns; "
                                    "print a table per workload.")
    bs.add_argument("--workload", action="append", metavar="NAME", help="K-A..K-E (the issue's), or K-T (two "
                    "tiny models); repeatable (default: K-A..K-E)")
    bs.add_argument("--duration", type=float, default=60.0, metavar="SECONDS", help="seconds each variant runs "
                    "per turn (default 60)")
    bs.add_argument("--repeat", type=int, default=1, help="turns of every variant (default 1)")
    bs.add_argument("--variant", action="append", metavar="NAME", help="rt-alone, be-alone, reef, fifo, processes, "
                    "nice19 or sched-idle; repeatable (default: all)")
    bs.add_argument("--seed", type=int, default=0, help="seed of the arrivals and inputs (default 0)")
    bs.add_argument("--json", metavar="FILE", help="write every number (and each variant's RT latencies) as JSON")
    bs.add_argument("--html", metavar="FILE", help="write the RT latency CDFs as a self-contained HTML page")
    bs.set_defaults(fn=cmd_bench_serve)

    d = sub.add_parser("demo", help="take a built-in CNN through every stage of Kiln",
                       description="Build a small CNN from code (fixed-seed weights) and take it through "
                                   "every stage Kiln has, printing what each did.")
    d.set_defaults(fn=cmd_demo)

    v = sub.add_parser("serve", help="serve a directory of models over HTTP (KServe v2, as Triton)",
                       description="Serve every model of REPO (NAME.onnx, or NAME/ holding a compiled directory or "
                                   "model.onnx, optionally in numeric version directories; settings in NAME.json "
                                   "or NAME/config.json) with the KServe v2 HTTP protocol until SIGTERM.")
    v.add_argument("repo", help="the model repository directory")
    v.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    v.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000; 0: any free port)")
    v.add_argument("--scheduler", choices=("reef", "fifo"), default="reef", help="reef: real-time requests "
                   "first, best-effort runs preempted for them (default); fifo: one queue, no priorities")
    v.add_argument("--max-body-mb", type=float, default=64, help="largest request body in MiB (default 64)")
    v.add_argument("--ray", nargs="?", const=True, default=False, metavar="ADDRESS", help="run each model's "
                   "requests on Ray actors (`replicas` in its config, default 1), least loaded first, in the cluster "
                   "at ADDRESS (\"auto\", host:port, ray://host:port; \"local\": always a new one) or else the one Ray "
                   "finds or starts; needs kiln[ray]")
    v.set_defaults(fn=cmd_serve)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if (args.cores, args.spin_us, args.pin) != (None, None, None):
            from kiln.runtime.thread_pool import configure_runtime

            configure_runtime(args.cores, args.spin_us, args.pin)
        return args.fn(args)
    except KilnError as e:
        print(f"kiln {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
