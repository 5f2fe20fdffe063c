"""What `kiln bench-serve` prints and writes: per workload and variant, RT p50/p99 against RT alone,
BE throughput against the capacity RT leaves (BE alone x (1 - RT utilization)), total throughput and
preemption latency; as a text table, JSON, and a self-contained HTML page of RT latency CDFs (inline
SVG, no scripts or downloads)."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import numpy as np

from kiln.serve.bench import Run

COLUMNS = (("variant", "variant", "{}"), ("rt_p50_ms", "RT p50 ms", "{:.3f}"), ("rt_p99_ms", "RT p99 ms", "{:.3f}"),
           ("rt_p50_overhead", "p50 vs alone", "{:+.1%}"), ("rt_p99_overhead", "p99 vs alone", "{:+.1%}"),
           ("be_per_s", "BE req/s", "{:.2f}"), ("be_vs_capacity", "BE / left", "{:.1%}"),
           ("total_per_s", "total req/s", "{:.2f}"), ("preempt_p50_us", "preempt p50 us", "{:.1f}"),
           ("preempt_p99_us", "preempt p99 us", "{:.1f}"), ("failures", "failures", "{}"))


def _pct(xs: list[float], q: float) -> float | None:
    return float(np.percentile(xs, q)) if xs else None


def summarize(result: dict[str, Any]) -> dict[str, Any]:
    """One workload's numbers: a row per variant, plus the calibration."""
    w, runs = result["workload"], result["runs"]
    rt_util = w.rt_utilization
    alone_rt = _rt_all(runs.get("rt-alone"))
    alone_be = runs["be-alone"].outcome.be_done if runs.get("be-alone") and runs["be-alone"].outcome else None
    base = runs["be-alone"].outcome.seconds if alone_be is not None else None
    rows = []
    for run in runs.values():
        rows.append(_row(run, alone_rt, alone_be and {m: n / base for m, n in alone_be.items()}, rt_util))
    return {"workload": w.name, "rt_utilization": rt_util, "rt": [vars(s) for s in w.rt], "be": list(w.be),
            "latency_alone_ms": {m: s * 1e3 for m, s in result["alone_s"].items()},
            "rt_rates_per_s": result["rates"], "rows": rows}


def _rt_all(run: Run | None) -> list[float]:
    if run is None or run.outcome is None:
        return []
    return [x for v in run.outcome.rt_latency_s.values() for x in v]


def _row(run: Run, alone_rt: list[float], alone_be: dict[str, float] | None, rt_util: float) -> dict[str, Any]:
    if run.outcome is None:
        return {"variant": run.variant, "skipped": run.skipped}
    o, lat = run.outcome, _rt_all(run)
    be = {m: n / o.seconds for m, n in o.be_done.items()}
    row: dict[str, Any] = {"variant": run.variant, "seconds": o.seconds, "rt_requests": len(lat),
                           "rt_p50_ms": _ms(_pct(lat, 50)), "rt_p99_ms": _ms(_pct(lat, 99)),
                           "rt_p50_overhead": _ratio(_pct(lat, 50), _pct(alone_rt, 50)),
                           "rt_p99_overhead": _ratio(_pct(lat, 99), _pct(alone_rt, 99)),
                           "rt_per_model_ms": {m: {"p50": _ms(_pct(v, 50)), "p99": _ms(_pct(v, 99))}
                                               for m, v in o.rt_latency_s.items()},
                           "be_per_s": sum(be.values()) if be else None, "be_per_model_per_s": be,
                           "total_per_s": (len(lat) + sum(o.be_done.values())) / o.seconds,
                           "preempt_p50_us": _us(_pct(run.preempt_s, 50)),
                           "preempt_p99_us": _us(_pct(run.preempt_s, 99)),
                           "preemptions": len(run.preempt_s), "failures": o.failures, "first_error": o.first_error,
                           "rt_latency_ms": sorted(x * 1e3 for x in lat)}
    if alone_be and be and rt_util < 1 and run.variant != "be-alone":
        share = np.mean([be[m] / alone_be[m] for m in be if alone_be.get(m)])
        row["be_vs_capacity"] = float(share / (1 - rt_util))
    return row


def _ms(s: float | None) -> float | None:
    return None if s is None else s * 1e3


def _us(s: float | None) -> float | None:
    return None if s is None else s * 1e6


def _ratio(x: float | None, base: float | None) -> float | None:
    return None if x is None or not base else x / base - 1


def table(summary: dict[str, Any]) -> str:
    """The workload's rows as aligned text."""
    lines = [[h for _, h, _ in COLUMNS]]
    for row in summary["rows"]:
        if row.get("skipped"):
            lines.append([row["variant"], f"skipped: {row['skipped']}"] + [""] * (len(COLUMNS) - 2))
            continue
        lines.append([fmt.format(row[k]) if row.get(k) is not None else "-" for k, _, fmt in COLUMNS])
    widths = [max(len(r[i]) for r in lines if i < len(r)) for i in range(len(COLUMNS))]
    head = (f"{summary['workload']}: RT utilization {summary['rt_utilization']:.0%}; latency alone "
            + ", ".join(f"{m} {v:.3f} ms" for m, v in summary["latency_alone_ms"].items()))
    return "\n".join([head] + ["  ".join(c.ljust(wd) for c, wd in zip(r, widths)).rstrip() for r in lines])


def write_json(summaries: list[dict[str, Any]], path: str | Path) -> None:
    Path(path).write_text(json.dumps({"workloads": summaries}, indent=1))


COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2")


def write_html(summaries: list[dict[str, Any]], path: str | Path) -> None:
    """A page with, per workload, the CDF of RT latency of every variant that sent RT requests."""
    parts = ["<!doctype html><meta charset='utf-8'><title>kiln bench-serve</title>",
             "<style>body{font:14px sans-serif;margin:2em}pre{font-size:12px}</style>",
             "<h1>kiln bench-serve: RT latency CDF</h1>"]
    for s in summaries:
        parts.append(f"<h2>{html.escape(s['workload'])}</h2>{_svg(s)}<pre>{html.escape(table(s))}</pre>")
    Path(path).write_text("\n".join(parts))


def _svg(summary: dict[str, Any], w: int = 640, h: int = 320, pad: int = 48) -> str:
    """Each variant's RT latency CDF on a log latency axis (one slow variant would squash a linear one)."""
    curves = [(r["variant"], r["rt_latency_ms"]) for r in summary["rows"] if r.get("rt_latency_ms")]
    if not curves:
        return "<p>no RT requests</p>"
    lo = max(min(v[0] for _, v in curves), 1e-3)
    hi = max(max(v[-1] for _, v in curves), lo * 10)
    span = np.log10(hi / lo)
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{w + 160}' height='{h}'>",
           f"<rect x='{pad}' y='8' width='{w - pad}' height='{h - pad - 8}' fill='none' stroke='#999'/>",
           f"<text x='{pad}' y='{h - pad + 16}'>{lo:.3g}</text><text x='{w - 40}' y='{h - pad + 16}'>{hi:.3g}</text>",
           f"<text x='{w // 2 - 60}' y='{h - 8}'>RT latency (ms, log scale)</text>",
           f"<text x='4' y='16'>1.0</text><text x='4' y='{h - pad}'>0</text>"]
    for i, (name, xs) in enumerate(curves):
        n, color = len(xs), COLORS[i % len(COLORS)]
        step = max(1, n // 400)
        pts = " ".join(f"{pad + np.log10(max(x, lo) / lo) / span * (w - pad):.1f},"
                       f"{h - pad - (j + 1) / n * (h - pad - 8):.1f}"
                       for j, x in list(enumerate(xs))[::step] + [(n - 1, xs[-1])])
        out.append(f"<polyline fill='none' stroke='{color}' stroke-width='1.5' points='{pts}'/>")
        out.append(f"<text x='{w + 10}' y='{24 + 18 * i}' fill='{color}'>{html.escape(name)}</text>")
    out.append("</svg>")
    return "".join(out)


def report(results: list[dict[str, Any]], json_path: str | None = None, html_path: str | None = None) -> None:
    """Print each workload's table; write the JSON and the HTML page where asked."""
    summaries = [summarize(r) for r in results]
    for s in summaries:
        print(table(s), end="\n\n")
    if json_path:
        write_json(summaries, json_path)
    if html_path:
        write_html(summaries, html_path)
