"""/metrics: the dispatcher's per-model counters in the Prometheus text exposition format (0.0.4),
one family per counter with a `model` label, histograms with cumulative `le` buckets."""

from __future__ import annotations

from collections.abc import Iterable

from kiln.serve.dispatch import Histogram, ModelStats

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

COUNTERS = [  # (metric name, ModelStats field, help)
    ("kiln_requests_total", "requests", "Requests completed, successfully or not."),
    ("kiln_failures_total", "failures", "Requests that ended in an error."),
    ("kiln_refused_total", "refused", "Requests refused because the model's queue was full."),
    ("kiln_timeouts_total", "timeouts", "Requests that timed out in the queue."),
    ("kiln_preemptions_total", "preemptions", "Runs of the model stopped for real-time work."),
]
HISTOGRAMS = [
    ("kiln_queue_seconds", "queue_s", "Time from arrival to the start of the request's run."),
    ("kiln_compute_seconds", "compute_s", "Time from the start to the end of a run, preempted time included."),
    ("kiln_batch_size", "batch_sizes", "Requests per run."),
    ("kiln_preemption_latency_seconds", "preempt_latency_s", "Time from a real-time arrival to this model's run "
                                                             "stopped."),
]


def label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(v: float) -> str:
    return repr(float(v)) if isinstance(v, float) else str(v)


def _histogram(metric: str, model: str, h: Histogram) -> Iterable[str]:
    for bound, count in zip(h.bounds, h.counts):
        yield f'{metric}_bucket{{model="{model}",le="{_number(bound)}"}} {count}'
    yield f'{metric}_bucket{{model="{model}",le="+Inf"}} {h.n}'
    yield f'{metric}_sum{{model="{model}"}} {_number(h.total)}'
    yield f'{metric}_count{{model="{model}"}} {h.n}'


def render(stats: dict[str, ModelStats], ready: dict[str, bool]) -> str:
    """The exposition text for every model's counters and whether each model is ready."""
    lines = ["# HELP kiln_model_ready 1 when the model is loaded and serving.", "# TYPE kiln_model_ready gauge"]
    lines += [f'kiln_model_ready{{model="{label(m)}"}} {int(r)}' for m, r in sorted(ready.items())]
    models = sorted(stats)
    for metric, attr, text in COUNTERS:
        lines += [f"# HELP {metric} {text}", f"# TYPE {metric} counter"]
        lines += [f'{metric}{{model="{label(m)}"}} {getattr(stats[m], attr)}' for m in models]
    for metric, attr, text in HISTOGRAMS:
        lines += [f"# HELP {metric} {text}", f"# TYPE {metric} histogram"]
        for m in models:
            lines += _histogram(metric, label(m), getattr(stats[m], attr))
    return "\n".join(lines) + "\n"
