"""Where a CNN's time goes in Kiln, kernel by kernel, and Kiln against ONNX Runtime on one thread.

    .venv/bin/python scripts/bench_conv.py resnet18 mobilenet_v2 small_cnn [--runs 15] [--opt-level 2]

Times are the calling thread's CPU time (time.thread_time) with one thread for both engines, so a
machine shared with other work (which steals wall time, not CPU time) still gives stable ratios;
run `kiln bench` for wall-clock latency with more threads. Per kernel: the best of `--runs` runs,
its conv FLOPs (2 per multiply-add, summed over the calls the kernel serves) and GFLOP/s.
"""

from __future__ import annotations

import argparse
import os
import time
import types

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import kiln  # noqa: E402
import kiln.runtime.executor as executor  # noqa: E402
from kiln.compiler.lower import build_graph_executor  # noqa: E402
from kiln.ir.expr import Call, Function  # noqa: E402
from kiln.ir.visitor import post_order  # noqa: E402
from kiln.models import mobilenet_v2, resnet18, resnet50, small_cnn  # noqa: E402

MODELS = {"resnet18": resnet18, "resnet50": resnet50, "mobilenet_v2": mobilenet_v2, "small_cnn": small_cnn}
CONVS = ("nn.conv", "nn.conv2d_nchwc")


def conv_flops(call: Call) -> int:
    w = call.args[1].type.shape
    macs = int(np.prod(w[1:4])) * w[4] if call.op.name == "nn.conv2d_nchwc" else int(np.prod(w[1:]))
    return 2 * int(np.prod(call.type.shape)) * macs


def kernels(cm: executor.GraphExecutor) -> dict[str, tuple[int, str]]:
    """kernel name -> (conv FLOPs over every call of it, a short description)."""
    out: dict[str, tuple[int, str]] = {}
    for e in post_order(cm.mod.main):
        if isinstance(e, Call) and isinstance(e.op, Function) and id(e.op) in cm.kernels:
            name = cm.kernels[id(e.op)].kernel.func.name
            calls = [c for c in post_order(e.op.body) if isinstance(c, Call)]
            convs = [c for c in calls if getattr(c.op, "name", "") in CONVS]
            fl = sum(conv_flops(c) for c in convs)
            what = (f"x{list(convs[0].args[0].type.shape)} w{list(convs[0].args[1].type.shape)} "
                    f"s{convs[0].attrs.strides or (1, 1)}" if convs else
                    "+".join(getattr(c.op, "name", "?") for c in calls))
            out[name] = (out.get(name, (0, what))[0] + fl, what)
    return out


def profile(name: str, runs: int, opt_level: int) -> None:
    mod = kiln.from_onnx(MODELS[name](batch=1))
    cm = build_graph_executor(mod, opt_level=opt_level)
    feeds = {p.name: np.random.default_rng(0).standard_normal([int(d) for d in p.type.shape]).astype(np.float32)
             for p in mod.main.params}
    executor.time = types.SimpleNamespace(perf_counter=time.thread_time)  # the profile in CPU time
    best: dict[str, float] = {}
    for _ in range(runs):
        p: dict[str, float] = {}
        cm.run(feeds, profile=p)
        for k, v in p.items():
            best[k] = min(best.get(k, 1e9), v)
    info = kernels(cm)
    total = sum(best.values())
    print(f"\n{name}: {total * 1e3:.2f} ms in kernels (sum of per-kernel bests), {len(best)} kernels")
    for k, t in sorted(best.items(), key=lambda kv: -kv[1])[:15]:
        fl, what = info.get(k, (0, ""))
        rate = f"{fl / t / 1e9:7.1f} GFLOP/s" if fl else " " * 15
        print(f"  {k:10s} {t * 1e3:8.3f} ms {rate}  {what[:90]}")
    versus_ort(name, mod, cm, feeds, runs)


def versus_ort(name: str, mod, cm, feeds, runs: int) -> None:
    try:
        import onnxruntime as ort
    except ImportError:
        return
    sess = kiln.InferenceSession(kiln.build(mod), threads=1)
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    o = ort.InferenceSession(MODELS[name](batch=1).SerializeToString(), so, providers=["CPUExecutionProvider"])
    tk, to = [], []
    for i in range(runs + 3):
        t0 = time.thread_time()
        sess.run(None, feeds)
        t1 = time.thread_time()
        o.run(None, feeds)
        t2 = time.thread_time()
        if i >= 3:
            tk.append(t1 - t0)
            to.append(t2 - t1)
    k, r = np.median(tk) * 1e3, np.median(to) * 1e3
    print(f"  kiln (aot) {k:.3f} ms vs onnxruntime {r:.3f} ms, 1 thread CPU time: {k / r:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=["resnet18", "mobilenet_v2", "small_cnn"], choices=list(MODELS))
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--opt-level", type=int, default=2)
    args = ap.parse_args()
    for name in args.models:
        profile(name, args.runs, args.opt_level)


if __name__ == "__main__":
    main()
