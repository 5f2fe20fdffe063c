"""`kiln bench`: Kiln, ONNX Runtime and the interpreter on the same inputs and thread count.

Engines take turns (`alternate`) so that a machine that speeds up or slows down during the benchmark
affects all of them alike. Reports median and p90 latency and GFLOP/s from the graph's
conv/matmul/gemm work.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class Engine:
    name: str
    run: Callable[[], list]
    times: list[float] = field(default_factory=list)

    def timed(self) -> list:
        t0 = time.perf_counter()
        out = self.run()
        self.times.append(time.perf_counter() - t0)
        return out


SETTLE_S = 0.1  # untimed runs at the start of a turn last at least this long: longer than any peer's spin


def alternate(engines: list[Engine], runs: int, burst: int = 5, deadline_s: float = math.inf,
              settle_s: float = SETTLE_S) -> None:
    """Time `runs` runs of each engine, taking turns: a turn is untimed runs for at least `settle_s`
    seconds (at least one), then `burst` timed ones.

    Why turns of several runs: every runtime keeps its worker threads spinning for a while after a
    run (libgomp by default for about 7 ms, ONNX Runtime's pool for 50-60 ms). Alternating run by
    run on a 2-core machine makes each run compete with the previous engine's spinning threads; a
    ~50 us model then loses whole scheduler slices and measures 10-50x slower than it runs alone.
    The untimed start of a turn outlasts those spins, and the timed runs measure each engine in
    steady state, as when it serves alone, while the turns still spread machine noise over all
    engines. Measured: Kiln's mobilenet_v2 runs in the first 50-60 ms after ONNX Runtime's took
    10.2-10.8 ms, later ones 6.8 ms (none slower with ORT's spinning off); with 20 ms turns Kiln's
    median was 10.3 ms, with 100 ms turns 6.95 ms.

    Stops early (after at least 5 turns) once `deadline_s` seconds have passed, so that one slow
    engine cannot hold the whole benchmark.
    """
    if runs < 1 or burst < 1:
        raise ValueError(f"runs and burst must be >= 1, got {runs} and {burst}")
    t_end = time.perf_counter() + deadline_s
    turns = 0
    while min(len(e.times) for e in engines) < runs:
        for e in engines:
            settle(e.run, settle_s)
            for _ in range(min(burst, runs - len(e.times))):
                e.timed()
        turns += 1
        if turns >= 5 and time.perf_counter() > t_end:
            break


def settle(run: Callable[[], object], seconds: float = SETTLE_S) -> int:
    """Run untimed for `seconds` (at least once): the start of a turn (see alternate). How many runs
    that took."""
    t0, n = time.perf_counter(), 0
    while n == 0 or time.perf_counter() - t0 < seconds:
        run()
        n += 1
    return n


def _kiln_engine(mod: Any, feeds: dict[str, np.ndarray], threads: int, opt_level: int, records: Any,
                 say: Callable[[str], None], build_options: Mapping[str, Any]) -> Engine:
    import kiln

    t0 = time.perf_counter()
    compiled = kiln.build(mod, opt_level=opt_level, records=records, **build_options)
    sess = kiln.InferenceSession(compiled, threads=threads)
    tag = f"{sess.model.executor}{', tuned' if records is not None else ''}"
    say(f"kiln: built in {(time.perf_counter() - t0) * 1e3:.0f} ms ({tag} executor"
        + (f", {len(sess.model.host_groups)} group(s) on the host)" if sess.model.host_groups else ")"))
    return Engine(f"kiln ({tag})", lambda: sess.run(None, feeds))


def engines(model: Any, mod: Any, feeds: dict[str, np.ndarray], threads: int, opt_level: int,
            say: Callable[[str], None], records: Any = None,
            build_options: Mapping[str, Any] | None = None) -> list[Engine]:
    """The engines to time; `build_options`: more keywords for kiln.build (pass options)."""
    import kiln

    build_options = build_options or {}
    out = [_kiln_engine(mod, feeds, threads, opt_level, None, say, build_options)]
    if records is not None:  # the tuned build next to the untuned one, alternating like the others
        out.append(_kiln_engine(mod, feeds, threads, opt_level, records, say, build_options))
    try:
        import onnxruntime as ort
    except ImportError:
        say("onnxruntime is not installed: skipped")
    else:
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
        ort_sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        out.append(Engine("onnxruntime", lambda: ort_sess.run(None, feeds)))
    out.append(Engine("interpreter", lambda: kiln.evaluate(mod, feeds)))
    return out


def bench(model: Any, dims: dict[str, int], threads: int | None, runs: int, warmup: int, opt_level: int = 2,
          seed: int = 0, say: Callable[[str], None] = print, records: Any = None, burst: int = 5,
          build_options: Mapping[str, Any] | None = None) -> list[Engine]:
    import kiln
    from kiln.compiler.flop_count import flop_count
    from kiln.errors import InputError
    from kiln.feeds import random_feeds, with_fixed_dims
    from kiln.frontend.onnx import load_model
    from kiln.target import host_cores

    if runs < 1 or warmup < 0 or burst < 1:
        raise InputError(f"--runs and --burst must be >= 1 and --warmup >= 0, got {runs}, {burst} and {warmup}")
    threads = threads or host_cores()
    model = with_fixed_dims(load_model(model), dims, say)
    mod = kiln.from_onnx(model)
    feeds = random_feeds(mod, {}, {}, seed)
    flops = flop_count(mod)
    say(f"inputs: {', '.join(f'{k}{list(v.shape)}' for k, v in feeds.items())}; threads {threads}; "
        f"{runs} runs after {warmup} warmup, in turns of {burst}; {flops / 1e9:.4f} GFLOP per run (conv/matmul/gemm)")
    eng = engines(model, mod, feeds, threads, opt_level, say, records, build_options)
    results = [e.run() for e in eng]
    for _ in range(warmup):
        for e in eng:
            e.run()
    alternate(eng, runs, burst)
    ref = results[-1]
    say(f"{'engine':18s} {'median ms':>10s} {'p90 ms':>10s} {'GFLOP/s':>10s} {'max |diff| vs interpreter':>26s}")
    for e, res in zip(eng, results):
        t = np.array(e.times) * 1e3
        med, p90 = float(np.median(t)), float(np.percentile(t, 90))
        gflops = f"{flops / (med * 1e-3) / 1e9:10.2f}" if flops and med > 0 else f"{'-':>10s}"
        say(f"{e.name:18s} {med:10.3f} {p90:10.3f} {gflops} {_max_diff(res, ref):26.2e}")
    return eng


def _max_diff(outs: list, ref: list) -> float:
    return max((float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
                for a, b in zip(outs, ref) if np.asarray(a).size), default=0.0)
