"""Fresh tensor and node names for what a rewrite adds, never colliding with the model's own."""

from __future__ import annotations

import onnx


class UniqueNames:
    def __init__(self, model: onnx.ModelProto):
        g = model.graph
        self.used = ({t.name for t in g.initializer} | {v.name for v in (*g.input, *g.output, *g.value_info)}
                     | {x for n in g.node for x in (*n.input, *n.output, n.name) if x})

    def fresh(self, base: str) -> str:
        """`base`, or `base_2`, `base_3`, ... if taken; the name is taken from then on."""
        name, k = base, 1
        while name in self.used:
            k += 1
            name = f"{base}_{k}"
        self.used.add(name)
        return name
