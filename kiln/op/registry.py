"""The operator registry: each operator is defined once, with everything the compiler needs.

An OpDef holds the operator's name (`family.op`), its attribute class (a frozen dataclass), a
type relation, a fusion pattern and a numpy reference implementation (the interpreter and
constant folding run it). kiln.topi attaches each operator's te compute later (see
OpDef.attach_compute); an operator that deliberately has none is marked `host_only`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field, is_dataclass
from typing import Any

from kiln.errors import TypeInferenceError
from kiln.ir.expr import Constant, Expr, Op, is_absent
from kiln.ir.op_table import OPS, register_op
from kiln.ir.types import Type


class Pattern(enum.IntEnum):
    """Fusion patterns, ordered as TVM orders them: a lower value fuses more freely."""

    ELEMWISE = 0
    BROADCAST = 1
    INJECTIVE = 2
    COMM_REDUCE = 3
    OUT_EWISE_FUSABLE = 4
    TUPLE = 7
    OPAQUE = 8


ELEMWISE, BROADCAST, INJECTIVE = Pattern.ELEMWISE, Pattern.BROADCAST, Pattern.INJECTIVE
COMM_REDUCE, OUT_EWISE_FUSABLE = Pattern.COMM_REDUCE, Pattern.OUT_EWISE_FUSABLE
TUPLE, OPAQUE = Pattern.TUPLE, Pattern.OPAQUE

# type relation: (attrs, arg types, constant arg values) -> output type.
# An omitted optional input appears as None in both lists; a non-constant arg's value is None.
TypeRel = Callable[[Any, list, list], Type]


@dataclass(frozen=True, eq=False)
class OpDef(Op):
    """One operator. Frozen and hashed by identity: every Call of it shares this record. `compute` and
    `runtime_dims` belong to kiln.topi (a layer above: computes need te), which attaches them once
    through attach_compute / mark_runtime_dims rather than a mutable side table keyed by name."""

    name: str
    pattern: Pattern
    type_rel: TypeRel
    reference: Callable[..., Any]  # reference(attrs, *arg values) -> value
    attrs_type: type | None = None
    num_inputs: tuple[int, int | None] = (1, 1)
    doc: str = ""
    pure: bool = True  # False: results are not a function of the inputs (random): never fold or merge
    host_only: bool = False  # no compute on purpose: always runs on `reference`, on the host
    # Attached by kiln.topi after definition (attach_compute / mark_runtime_dims), never passed in:
    compute: Callable[..., Any] | None = field(default=None, init=False)  # kiln.topi.registry.ComputeFn
    runtime_dims: bool = field(default=False, init=False)  # compute is correct on dims known only at run time

    def attach_compute(self, fn: Callable[..., Any]) -> None:
        """Attach the te compute (kiln.topi.registry.register_compute calls this); set once.
        NOTE: object.__setattr__ here and in mark_runtime_dims are the only writes to the frozen record."""
        if self.host_only:
            raise ValueError(f"{self.name} is host_only: it cannot have a compute")
        if self.compute is not None:
            raise ValueError(f"compute of {self.name} registered twice")
        object.__setattr__(self, "compute", fn)

    def mark_runtime_dims(self) -> None:
        """Say that the compute stays correct on dims known only at run time (see attach_compute)."""
        object.__setattr__(self, "runtime_dims", True)

    def infer_type(self, args: tuple[Expr, ...], attrs: Any) -> Type:
        lo, hi = self.num_inputs
        if len(args) < lo or (hi is not None and len(args) > hi):
            want = f"{lo}" if lo == hi else f"{lo}..{hi if hi is not None else 'n'}"
            raise TypeInferenceError(f"expects {want} inputs, got {len(args)}")
        if self.attrs_type is not None and not isinstance(attrs, self.attrs_type):
            raise TypeInferenceError(f"expects attrs {self.attrs_type.__name__}, got {type(attrs).__name__}")
        # omitted optional inputs (trailing ones are dropped) appear as None up to the op's arity
        pad = [None] * ((hi if hi is not None else len(args)) - len(args))
        types = [None if is_absent(a) else a.type for a in args] + pad
        values = [a.data if isinstance(a, Constant) else None for a in args] + pad
        try:
            return self.type_rel(attrs, types, values)
        except TypeInferenceError:
            raise
        except (ValueError, IndexError, TypeError, KeyError, AssertionError) as e:
            raise TypeInferenceError(f"{type(e).__name__}: {e}") from None

    def __call__(self, *args: Expr, attrs: Any = None, name: str = "", **kw) -> Expr:
        """Build a Call: `nn.relu(x)` or `nn.conv(x, w, strides=(2, 2))`."""
        from kiln.ir.expr import Call

        if attrs is None and self.attrs_type is not None:
            attrs = self.attrs_type(**kw)
        elif kw:
            raise TypeError(f"{self.name} takes no attributes {sorted(kw)}")
        return Call(self, args, attrs, name)

    def __repr__(self) -> str:
        return self.name


REGISTRY: dict[str, OpDef] = OPS  # type: ignore[assignment]  (the ir table itself: only OpDefs enter it)


def define_op(name: str, *, pattern: Pattern, infer: TypeRel, ref: Callable[..., Any],
              attrs: type | None = None, inputs: int | tuple[int, int | None] = 1,
              doc: str = "", pure: bool = True, host_only: bool = False) -> OpDef:
    """Define and register an operator. `inputs` is a count or a (min, max) range (max None: variadic).
    host_only: the operator has no compute on purpose (strings, sequences, random ...)."""
    if attrs is not None and not is_dataclass(attrs):
        raise TypeError(f"{name}: attrs must be a frozen dataclass")
    rng = (inputs, inputs) if isinstance(inputs, int) else inputs
    op = OpDef(name, pattern, infer, ref, attrs, rng, doc, pure, host_only)
    return register_op(op)


def get_op(name: str) -> OpDef:
    if name not in REGISTRY:
        raise KeyError(f"no operator named {name!r}")
    return REGISTRY[name]
