"""`kiln demo`: the main job on the built-in CNN, stage by stage. It grows as Kiln grows."""

from __future__ import annotations

import time

import numpy as np


def _stage(title: str) -> float:
    print(f"\n== {title}")
    return time.perf_counter()


def _done(t0: float, what: str) -> None:
    print(f"   {what} ({(time.perf_counter() - t0) * 1e3:.1f} ms)")


def _median_ms(fn, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e3


def run_demo(batch: int = 2) -> int:
    import kiln
    from kiln.ir import Call, Function, Op, post_order
    from kiln.ir.module import param_bytes
    from kiln.models import small_cnn
    from kiln.summary import checksum, op_counts
    from kiln.transform import PassContext, PassTiming

    t = _stage("1. build the model from code (fixed-seed weights)")
    model = small_cnn()
    _done(t, f"ONNX graph 'kiln_small_cnn': {len(model.graph.node)} nodes, "
             f"{len(model.graph.initializer)} initializers, opset {model.opset_import[0].version}")

    t = _stage("2. import ONNX -> Kiln IR")
    mod = kiln.from_onnx(model)
    counts = op_counts(mod)
    _done(t, f"{sum(counts.values())} operator calls: "
             + ", ".join(f"{k} x{v}" for k, v in sorted(counts.items())) + f"; weights {param_bytes(mod):,} bytes")
    print(f"   signature: {mod.main.type}")

    t = _stage("3. check the IR (well-formedness) and round-trip its text form")
    kiln.ir.check_well_formed(mod)
    text, params = kiln.ir.text_with_params(mod)
    again = kiln.ir.parse(text, params)
    same = kiln.ir.structural_equal(mod, again)
    _done(t, f"well-formed; text form {len(text.splitlines())} lines, {len(params)} weights by reference; "
             f"parse(print(m)) == m: {same}")
    print("   " + "\n   ".join(line[:110] + (" ..." if len(line) > 110 else "") for line in text.splitlines()[:6]))
    if not same:
        print("   ERROR: the text form did not round-trip")
        return 1

    t = _stage("4. optimize the graph (standard pipeline, opt_level 3)")
    timing = PassTiming()
    with PassContext(opt_level=3, instruments=[timing]) as ctx:
        opt = kiln.optimize(mod, 3, ctx)
    groups = [e for e in post_order(opt.main) if isinstance(e, Function) and e.attr("Primitive")]
    ran = sorted({n for n, _ in timing.times})
    _done(t, f"{len(timing.times)} pass runs ({', '.join(ran)}); {sum(counts.values())} operator calls -> "
             f"{len(groups)} fused kernels:")
    for g in groups:
        ops = [c.op.name for c in post_order(g.body) if isinstance(c, Call) and isinstance(c.op, Op)]
        print(f"     [{' -> '.join(ops)}]")

    t = _stage(f"5. run with the reference interpreter (batch {batch}, symbolic dim N bound at run time)")
    x = np.random.default_rng(1).standard_normal((batch, 3, 32, 32)).astype(np.float32)
    (probs,) = kiln.evaluate(mod, {"image": x})
    (probs_opt,) = kiln.evaluate(opt, {"image": x})
    _done(t, f"probs: shape {probs.shape}, {probs.dtype}, {checksum(probs)}; rows sum to "
             f"{np.round(probs.sum(axis=1), 5).tolist()}; optimized vs original max diff "
             f"{float(np.max(np.abs(probs_opt - probs))):.2e}")

    t = _stage(f"6. compile with kiln.build (batch fixed to {batch}) and run the C kernels")
    compiled = kiln.build(small_cnn(batch=batch))
    _done(t, f"{compiled.report.kernels} kernels, {compiled.executor} executor, library "
             f"{'from the compile cache' if compiled.report.cached else 'compiled by gcc'}")
    (probs_c,) = compiled.run({"image": x})
    kiln_ms = _median_ms(lambda: compiled.run({"image": x}))
    interp_ms = _median_ms(lambda: kiln.evaluate(mod, {"image": x}))
    diff = float(np.max(np.abs(probs_c - probs)))
    print(f"   compiled vs interpreter max diff {diff:.2e}; median run: compiled {kiln_ms:.2f} ms, "
          f"interpreter {interp_ms:.2f} ms")
    if diff > 1e-4:
        print("   ERROR: the compiled model disagrees with the interpreter")
        return 1

    t = _stage("7. compare with ONNX Runtime (a test oracle, if installed)")
    try:
        import onnxruntime as ort
    except ImportError:
        print("   onnxruntime is not installed: skipped (pip install 'kiln[test]')")
        return 0
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (ref,) = sess.run(None, {"image": x})
    err = max(float(np.max(np.abs(ref - probs))), float(np.max(np.abs(ref - probs_opt))))
    _done(t, f"max |kiln - onnxruntime| = {err:.2e} (original and optimized graphs)")
    return 0 if err < 1e-4 else 1
