"""`kiln quantize`: the command's output around `kiln.quantize` (a summary, the error table, the JSON report)."""

from __future__ import annotations

from collections import Counter

from kiln.quantization import quantize
from kiln.quantization.error_report import write_json


def run_quantize(model: str, output: str, calibrate: str | None, method: str, percentile: float,
                 per_channel: bool, dynamic: bool, report_path: str | None) -> int:
    """Quantize MODEL into OUTPUT and say what was done; with a report path, print the table and write JSON."""
    result = quantize(model, output, calibrate=calibrate, method=method, percentile=percentile,
                      per_channel=per_channel, dynamic=dynamic, report=report_path is not None)
    counts = Counter(n.op_type for n in result.model.graph.node)
    added = ", ".join(f"{counts[op]} {op}" for op in ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
                                                      "MatMulInteger") if counts[op])
    kind = "dynamic" if dynamic else f"static ({method})"
    print(f"wrote {output}: {kind} int8, {'per-channel' if per_channel else 'per-tensor'} weights; {added or 'no'} "
          f"quantization nodes")
    if result.report is not None:
        print(result.report.table())
        write_json(result.report, report_path)
        print(f"wrote {report_path}")
    return 0
