"""Kiln against ONNX Runtime layer by layer: every conv / matmul of a model, Kiln's kernel (timed in C
by kiln_model_profile; a Winograd conv counts its input and output transforms with its product) beside
the ONNX Runtime node that computes it (its profiler's kernel time). Usage:

    .venv/bin/python scripts/compare_layers.py resnet50 --threads 2 --rounds 20

Whole-model timings say whether Kiln is faster; this says where it wins and loses. The two take
turns (kiln.bench.settle, as kiln.bench.alternate): each turn starts with untimed runs for longer
than either runtime's threads spin after a run (ONNX Runtime's pool spins 50-60 ms), so neither is
timed beside the other's spinning threads or just after an idle pause. Layers pair by output size,
then weight size, then execution order (see pair); layers either side fuses away (ONNX Runtime's
attention nodes) are listed unpaired.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

ANCHORS = ("conv2d_nchwc", "conv2d", "dense_packed", "dense", "mat_mul", "batch_mat_mul", "gemm")
ORT_LAYERS = ("Conv", "FusedConv", "MatMul", "FusedMatMul", "Gemm", "FusedGemm")
# each layer's time is this percentile of its times over the turns: on a shared machine whose speed swings
# 1.5-2x for seconds at a time (a Kiln run of mobilenet_v2 read 6.6 to 18 ms within one minute), a low
# percentile estimates what the kernel costs, a median what the machine was doing
QUANTILE = 25


def kiln_layers(per_call: list[tuple[str, float]], ops: dict[str, list[str]],
                elements: dict[str, int]) -> list[tuple[float, str, int]]:
    """(seconds, kernel, output elements) per anchored layer, in call order: a kernel whose ops
    include an anchor is a layer; a Winograd product takes the input transform before it and the
    next output transform (another layer, a block's projection shortcut, may run in between), whose
    output is then the layer's; other kernels (pools, layout changes) are left out."""
    layers: list[list] = []
    pending, products = 0.0, []
    for name, t in per_call:
        names = ops.get(name, [])
        if any(op in ANCHORS for op in names):
            layers.append([t + pending, name, elements.get(name, 0)])
            if pending:
                products.append(layers[-1])
            pending = 0.0
        elif "winograd_input" in names:
            pending += t
        elif "winograd_output" in names and products:
            product = products.pop(0)
            product[0] += t
            product[2] = elements.get(name, 0)
    return [(t, name, n) for t, name, n in layers]


def pair(kiln_keys: list[tuple[int, int]], ort_keys: list[tuple[int, int]]) -> list[int | None]:
    """For each Kiln layer (output elements, weight elements), an ONNX Runtime layer with as many
    output elements: first those whose weight is as large too (direct convs, matmuls), then the rest
    (a Winograd product's transformed weight, 16/9 or 36/9 of the direct 3x3's) to the weight nearest
    in size; among equals the one nearest in execution order (the two may order a block's shortcut
    and its convs differently, and repeated blocks have equal layers). Each is used once; None where
    none is left."""
    free = set(range(len(ort_keys)))
    out: list[int | None] = [None] * len(kiln_keys)

    def take(i: int, candidates: list[int], distance) -> None:
        j = min(candidates, key=lambda j: (distance(j), abs(j - i)), default=None)
        if j is not None:
            free.remove(j)
            out[i] = j

    for i, key in enumerate(kiln_keys):
        take(i, [j for j in free if ort_keys[j] == key], lambda j: 0)
    for i, (n, weight) in enumerate(kiln_keys):
        if out[i] is None:
            take(i, [j for j in free if ort_keys[j][0] == n],
                 lambda j, w=weight: abs(math.log((w + 1) / (ort_keys[j][1] + 1))))
    return out


def ort_layers(events: list[dict]) -> list[tuple[int, float, str, int, int]]:
    """(start, seconds, label, output elements, weight elements) of every conv / matmul node's kernel
    in an ONNX Runtime profile (the weight: the node's second input)."""
    out = []
    for e in events:
        args = e.get("args", {})
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and args.get("op_name") in ORT_LAYERS:
            dims = next(iter((args.get("output_type_shape") or [{}])[0].values()), [])
            inputs = [next(iter(x.values()), []) for x in args.get("input_type_shape") or []]
            weight = math.prod(inputs[1]) if len(inputs) > 1 else 0
            out.append((e["ts"], e["dur"] / 1e6, f"{args['op_name']} {json.dumps(dims)}", math.prod(dims), weight))
    return sorted(out)


def weight_elements(fn) -> int:
    """Elements of a layer group's weight: its second parameter (the first is the data; weights are
    parameters of the AOT's groups, bound at run time)."""
    if len(fn.params) < 2:
        return 0
    try:
        return math.prod(int(d) for d in fn.params[1].type.shape)
    except (AttributeError, TypeError):
        return 0


def main() -> None:
    import onnxruntime as ort

    from kiln.bench import settle
    from kiln.runtime.executor import primitive_functions
    from profile_model import build, describe, model_arguments, op_names, output_elements

    p = model_arguments(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    p.add_argument("--rounds", type=int, default=20, help="turns of each runtime (default 20)")
    args = p.parse_args()
    model, feeds, aot = build(args)
    fns = list(primitive_functions(aot.mod))
    ops = {f"fused_{n}": op_names(fn) for n, fn in enumerate(fns)}
    described = {f"fused_{n}": describe(fn) for n, fn in enumerate(fns)}
    elements = {f"fused_{n}": output_elements(fn) for n, fn in enumerate(fns)}
    weights = {f"fused_{n}": weight_elements(fn) for n, fn in enumerate(fns)}
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = args.threads, 1
    so.enable_profiling = True
    scratch = tempfile.TemporaryDirectory(prefix="kiln-compare-")  # the trace, gone however the run ends
    so.profile_file_prefix = str(Path(scratch.name) / "ort")
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    kiln_rounds, measured = [], []  # measured: per ONNX Runtime run, whether it is timed
    for _ in range(args.rounds):
        settle(lambda: aot.run(feeds))
        kiln_rounds.append(kiln_layers(aot.profile(feeds, 2), ops, elements))
        measured += [False] * settle(lambda: sess.run(None, feeds)) + [True] * 2
        for _ in range(2):
            sess.run(None, feeds)
    events = ort_layers(json.loads(Path(sess.end_profiling()).read_text()))
    scratch.cleanup()
    per_run = len(events) // len(measured)
    runs = [[e[1] for e in events[i * per_run:(i + 1) * per_run]] for i, timed in enumerate(measured) if timed]
    ort_t = np.percentile(np.array(runs), QUANTILE, axis=0) if per_run else np.zeros(0)
    kiln_t = np.percentile(np.array([[layer[0] for layer in r] for r in kiln_rounds]), QUANTILE, axis=0)
    kiln_l, ort_l = kiln_rounds[0], events[:per_run]
    print(f"{args.model} batch {args.batch} threads {args.threads}: layers Kiln {kiln_t.sum() * 1e3:.3f} ms "
          f"({len(kiln_t)}), ONNX Runtime {ort_t.sum() * 1e3:.3f} ms ({len(ort_t)})")
    pairs = pair([(n, weights[name]) for _, name, n in kiln_l], [(e[3], e[4]) for e in ort_l])
    slower = faster = 0.0
    for i, ((_, name, _), j) in enumerate(zip(kiln_l, pairs)):
        k = kiln_t[i]
        if j is None:
            print(f"{i:4d} kiln {k * 1e3:7.3f} ms  (no ONNX Runtime layer with its output size)  {described[name]}")
            continue
        o = ort_t[j]
        slower, faster = slower + max(k - o, 0.0), faster + max(o - k, 0.0)
        print(f"{i:4d} kiln {k * 1e3:7.3f} ms  ort {o * 1e3:7.3f} ms  {k / o:5.2f}x  "
              f"{described[name][:48]:48s} | {ort_l[j][2]}")
    for j in sorted(set(range(len(ort_l))) - set(pairs)):
        print(f"     ort  {ort_t[j] * 1e3:7.3f} ms  not paired: {ort_l[j][2]}")
    print(f"paired layers: Kiln loses {slower * 1e3:.3f} ms where slower, gains {faster * 1e3:.3f} ms where faster")

if __name__ == "__main__":
    main()
