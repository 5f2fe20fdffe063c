"""Where a model's time goes: time per kernel of the AOT entry (kiln_model_profile, timed in C around
each call), summed over the calls of a kernel, largest first, with its conv/matmul work and achieved
GFLOP/s. Usage:

    .venv/bin/python scripts/profile_model.py mobilenet_v2 --batch 1 --threads 1 --runs 20 --top 25
"""

from __future__ import annotations

import argparse
import ctypes
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    from kiln.compiler.flop_count import flop_count
    from kiln.ir.module import IRModule
    from kiln.runtime.executor import primitive_functions

    p = model_arguments(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--top", type=int, default=30)
    args = p.parse_args()
    model, feeds, aot = build(args)
    for _ in range(3):
        aot.run(feeds)
    t0 = time.perf_counter()
    for _ in range(args.runs):
        aot.run(feeds)
    wall = (time.perf_counter() - t0) / args.runs
    per_call = aot.profile(feeds, args.runs)
    # kernel name -> FLOPs of one call; a group's kernel is named by its index (lower_groups), and
    # groups equal to an earlier one call that one's kernel
    group_flops, group_ops = {}, {}
    for n, fn in enumerate(primitive_functions(aot.mod)):
        group_flops[f"fused_{n}"] = flop_count(IRModule({"main": fn}))
        group_ops[f"fused_{n}"] = describe(fn)
    by_name: dict[str, list[float]] = {}
    for name, t in per_call:
        by_name.setdefault(name, []).append(t)
    total = sum(t for _, t in per_call)
    print(f"{args.model} batch {args.batch} threads {args.threads}: {wall * 1e3:.3f} ms per run, "
          f"{total * 1e3:.3f} ms in {len(per_call)} kernel calls")
    print(f"memory: {aot.memory_report()}")
    pool = getattr(aot, "last_pool", None)
    if pool is not None:
        print(f"pool: peak live {pool.peak_live} B, peak held {pool.peak_held} B")
    for name, ts in sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:args.top]:
        t = sum(ts)
        f = group_flops.get(name, 0) * len(ts)
        gf = f"{f / t / 1e9:7.1f}" if f and t else "      -"
        print(f"{t * 1e3:8.3f} ms {100 * t / total:5.1f}% {gf} GFLOP/s  {name} x{len(ts)}  {group_ops.get(name, '')}")


def model_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The arguments that name a model and how to build and run it."""
    from bench_models import EXTRA, MODELS

    p.add_argument("model", help=f"one of {', '.join(MODELS + EXTRA)}, a model of kiln.models.wide, or an .onnx "
                                 "file (symbolic dims = 1)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--opt-level", type=int, default=3)
    p.add_argument("--memory-strategy", choices=("arena", "counted"), default="arena")
    return p


def build(args: argparse.Namespace):
    """(ONNX model, feeds, AOT module running on args.threads threads) for model_arguments' args."""
    import kiln
    from bench_models import feeds_for
    from kiln.codegen import openmp_env
    from kiln.compiler.aot import build_aot

    model = load(args.model, args.batch)
    aot = build_aot(kiln.from_onnx(model), opt_level=args.opt_level,
                    memory_strategy=getattr(args, "memory_strategy", "arena"))
    set_threads = openmp_env.set_num_threads(aot.library)
    if set_threads is not None:
        set_threads(ctypes.c_int(args.threads))
    return model, feeds_for(model), aot


def load(name: str, batch: int):
    """A built-in benchmark model by name (bench_models' or the wide set's), or an .onnx file with its
    symbolic dims set to 1."""
    from bench_models import EXTRA, MODELS, make_model
    from kiln.models.wide import WIDE

    if name in MODELS + EXTRA:
        return make_model(name, batch)
    if name in WIDE:
        return WIDE[name].build(batch)
    from kiln.feeds import with_fixed_dims
    from kiln.frontend.onnx import load_model

    return with_fixed_dims(load_model(name), {}, lambda _: None)


def op_names(fn) -> list[str]:
    """The group's operators in evaluation order, short names (conv2d_nchwc, add, relu)."""
    return [e.op.name.split(".")[-1] for e in _op_calls(fn)]


def _op_calls(fn) -> list:
    from kiln.ir.expr import Call, Op
    from kiln.ir.visitor import post_order

    return [e for e in post_order(fn.body) if isinstance(e, Call) and isinstance(e.op, Op)]


def output_elements(fn) -> int:
    """Elements of the group's output (0 when not a tensor of static shape)."""
    calls = _op_calls(fn)
    shape = getattr(calls[-1].type, "shape", None) if calls else None
    try:
        return math.prod(int(d) for d in shape) if shape is not None else 0
    except TypeError:
        return 0


def describe(fn) -> str:
    """The group's ops in order, the first one (the anchor, usually) with its output shape."""
    calls = _op_calls(fn)
    shape = getattr(calls[-1].type, "shape", None) if calls else None
    return f"{' > '.join(op_names(fn))} -> {list(shape) if shape is not None else '?'}"


if __name__ == "__main__":
    main()
