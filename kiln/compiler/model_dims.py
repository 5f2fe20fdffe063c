"""A model's input dims: whether they are static, fixing symbolic ones in an ONNX model, typing main with shapes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kiln.errors import KilnError
from kiln.ir.expr import Function, Var
from kiln.ir.module import IRModule
from kiln.ir.types import TensorType
from kiln.transform.basic import substitute


def is_static(mod: IRModule) -> bool:
    return all(isinstance(p.type, TensorType) and p.type.shape is not None
               and all(isinstance(d, int) for d in p.type.shape) for p in mod.main.params)


def fix_dims(model: Any, dims: dict[str, int]) -> Any:
    """A copy of the ONNX model whose symbolic input/output dims named in `dims` are fixed sizes."""
    import onnx

    from kiln.frontend.onnx import load_model

    m = onnx.ModelProto()
    m.CopyFrom(load_model(model))
    used = set()
    for vi in [*m.graph.input, *m.graph.output]:
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param in dims:
                used.add(d.dim_param)
                d.dim_value = dims[d.dim_param]
    unknown = sorted(set(dims) - used)
    if unknown:
        raise KilnError(f"the model has no symbolic dim named {', '.join(unknown)}")
    return m


def with_input_shapes(mod: IRModule, shapes: Sequence[tuple[int, ...]]) -> IRModule:
    """`mod` with main's tensor parameters given the static `shapes` (one per parameter, in order);
    every call is re-typed with them."""
    main = mod.main
    params = tuple(Var(p.name, TensorType(tuple(s), p.type.dtype)) if isinstance(p.type, TensorType) else p
                   for p, s in zip(main.params, shapes))
    body = substitute(main.body, {id(old): new for old, new in zip(main.params, params) if old is not new})
    return mod.with_function("main", Function(params, body, main.attrs))
