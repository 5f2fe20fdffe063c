"""IRModule: named functions; `main` is the entry point."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kiln.ir.expr import Function, GlobalVar, Var
from kiln.ir.types import TupleType, Type


@dataclass(frozen=True, eq=False)
class IRModule:
    """functions: name -> Function. Output names (from the model) ride along for the runtime."""

    functions: dict[str, Function]
    output_names: tuple[str, ...] = ()
    metadata: dict = field(default_factory=dict, compare=False)

    @property
    def main(self) -> Function:
        return self.functions["main"]

    def global_var(self, name: str) -> GlobalVar:
        return GlobalVar(name, self.functions[name].type)

    def with_function(self, name: str, fn: Function) -> IRModule:
        return IRModule({**self.functions, name: fn}, self.output_names, dict(self.metadata))

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.input_vars)

    @property
    def input_vars(self) -> tuple[Var, ...]:
        """The model's inputs: main's parameters (a saved model knows them without its graph)."""
        return self.main.params

    @property
    def output_types(self) -> tuple[Type, ...]:
        """The type of each of the model's outputs (main returns a tuple of them, or one)."""
        t = self.main.body.type
        return tuple(t.fields) if isinstance(t, TupleType) else (t,)

    def __repr__(self) -> str:
        from kiln.ir.printer import text

        return text(self)


def param_bytes(mod: IRModule) -> int:
    """Total bytes held by Constants of the module (the weights)."""
    from kiln.ir.expr import Constant
    from kiln.ir.visitor import post_order

    total = 0
    for fn in mod.functions.values():
        for e in post_order(fn):
            if isinstance(e, Constant) and isinstance(e.data, np.ndarray):
                total += e.data.nbytes
    return total
