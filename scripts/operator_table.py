"""Print docs/operators.md: every registered operator with its fusion pattern and ONNX op types.

Usage: .venv/bin/python scripts/operator_table.py > docs/operators.md
"""

from __future__ import annotations

import collections

import kiln.frontend.onnx_ops  # noqa: F401  (registers operators and converters)
from kiln.frontend.onnx import CONVERTERS
from kiln.op import REGISTRY

EXCLUDED = """\
## Left out, with the reason

Every ONNX op type of the node conformance suite (197, plus the sequence ops used by the expanded
cases) has a converter. What is not supported inside an op:

- **ImageDecoder** of JPEG, JPEG 2000 and WebP: decoding these needs an image codec library, and
  Kiln's core dependencies are numpy and onnx only. BMP, PNG, PNM and TIFF are decoded by Kiln.
- **Bernoulli / Random\\*** values: random streams are implementation-defined; Kiln honours `seed`
  with numpy's generator, so shapes and dtypes match ONNX but values differ from onnx.reference's.
- **BatchNormalization** with `spatial=0` (opset < 9) and training outputs before opset 14, **Tile**
  before opset 6, and **Scan-8** with `sequence_lens`: rejected with an error naming the node.
"""


def main() -> None:
    onnx_of: dict[str, list[str]] = collections.defaultdict(list)
    for (domain, op_type), conv in sorted(CONVERTERS.items()):
        mod = conv.__module__.rsplit(".", 1)[-1]
        onnx_of[mod].append(op_type if not domain else f"{domain}:{op_type}")
    print("# Operators\n")
    print(f"{len(REGISTRY)} operators are registered (kiln/op/), and {len(CONVERTERS)} ONNX op types have "
          "converters (kiln/frontend/onnx_*.py).\n")
    print("| operator | pattern | inputs | doc |\n| --- | --- | --- | --- |")
    for name, op in sorted(REGISTRY.items()):
        lo, hi = op.num_inputs
        arity = str(lo) if lo == hi else f"{lo}..{hi if hi is not None else 'n'}"
        doc = (op.doc or "").split(". ")[0].replace("|", "\\|").replace("\n", " ")
        print(f"| `{name}` | {op.pattern.name.lower()} | {arity} | {doc} |")
    print("\n## ONNX op types by converter module\n")
    for mod, ops in sorted(onnx_of.items()):
        print(f"- **{mod}**: {', '.join(sorted(ops))}")
    print()
    print(EXCLUDED)


if __name__ == "__main__":
    main()
