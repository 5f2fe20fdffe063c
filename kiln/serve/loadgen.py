"""DISB-style load on a Dispatcher, in-process: open-loop RT clients (each request sent at its
scheduled time whether or not earlier ones were answered, so a slow server cannot slow the load
down, as real-time sensors do not) and closed-loop BE clients (send, wait for the answer, send
again: they take whatever the server gives them). Arrivals are uniform or Poisson from a fixed seed."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from kiln.serve.dispatch import Dispatcher, InferRequest, Priority

ANSWER_TIMEOUT_S = 120.0  # a request unanswered this long counts as failed (a hung server ends the run)


@dataclass(frozen=True)
class RtLoad:
    """RT requests to `model` at `rate` per second."""

    model: str
    rate: float
    arrival: str = "uniform"


@dataclass
class Outcome:
    """What the clients saw in `seconds`: RT latencies per model, BE answers per model, failures."""

    seconds: float
    rt_latency_s: dict[str, list[float]] = field(default_factory=dict)
    be_done: dict[str, int] = field(default_factory=dict)
    failures: int = 0
    first_error: str | None = None


def arrivals(load: RtLoad, seconds: float, rng: np.random.Generator) -> np.ndarray:
    """Send times in [0, seconds): evenly spaced (phase drawn at random) or a Poisson process."""
    if load.rate <= 0:
        return np.zeros(0)
    if load.arrival == "poisson":
        gaps = rng.exponential(1.0 / load.rate, int(seconds * load.rate * 2 + 16))
        times = np.cumsum(gaps)
    else:
        times = rng.uniform(0, 1.0 / load.rate) + np.arange(int(seconds * load.rate) + 1) / load.rate
    return times[times < seconds]


def drive(dispatcher: Dispatcher, feeds: Mapping[str, dict[str, np.ndarray]], rt: list[RtLoad], be: list[str],
          seconds: float, seed: int = 0) -> Outcome:
    """Run the clients against `dispatcher` for `seconds`, then wait for the RT answers still due."""
    out = Outcome(seconds, {r.model: [] for r in rt}, {m: 0 for m in be})
    lock, start = threading.Lock(), time.perf_counter()
    end = start + seconds
    rng = np.random.default_rng(seed)
    schedules = [(r, arrivals(r, seconds, rng)) for r in rt]
    pending: list = []

    def fail(e: BaseException) -> None:
        with lock:
            out.failures += 1
            out.first_error = out.first_error or f"{type(e).__name__}: {e}"

    def record(f, arrival: float, model: str) -> None:
        now = time.perf_counter()
        if f.exception() is not None:
            fail(f.exception())
            return
        with lock:
            out.rt_latency_s[model].append(now - arrival)

    def rt_client(load: RtLoad, times: np.ndarray) -> None:
        for t in times:
            _sleep_until(start + t)
            req = InferRequest(load.model, feeds[load.model], priority=Priority.RT)
            f = dispatcher.submit(req)
            f.add_done_callback(lambda f, a=req.arrival, m=load.model: record(f, a, m))
            pending.append(f)

    def be_client(model: str) -> None:
        while time.perf_counter() < end:
            try:
                dispatcher.submit(InferRequest(model, feeds[model], priority=Priority.BE)).result(ANSWER_TIMEOUT_S)
            except Exception as e:  # noqa: BLE001 - counted and reported, the client keeps going
                fail(e)
                continue
            if time.perf_counter() <= end:
                with lock:
                    out.be_done[model] += 1

    threads = [threading.Thread(target=rt_client, args=s, daemon=True) for s in schedules]
    threads += [threading.Thread(target=be_client, args=(m,), daemon=True) for m in be]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for f in list(pending):
        try:
            f.exception(ANSWER_TIMEOUT_S)
        except TimeoutError as e:
            fail(e)
    return out


def _sleep_until(when: float) -> None:
    """Sleep until `when` (no spinning: a spinning client would hold the GIL the scheduler's
    threads need, for up to the interpreter's switch interval)."""
    left = when - time.perf_counter()
    if left > 0:
        time.sleep(left)
