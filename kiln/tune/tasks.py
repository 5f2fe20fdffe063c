"""Tuning tasks: the distinct fused groups of a model whose schedules have knobs.

A task is identified by its workload key: a hash of the group's structure (operators, attributes,
shapes, dtypes; not the weights' values, which do not change how fast a schedule is) and of the
target (kiln.Target's key: the machine and the compiler). Builds look tuned configs up by
the same key, so a record applies to every model that contains the same group.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from kiln.codegen.lower_fused import Kernel, lower_primitive
from kiln.ir.expr import Call, Constant, Function, Op, Tuple, TupleGetItem, Var
from kiln.ir.module import IRModule
from kiln.ir.types import TupleType
from kiln.ir.visitor import post_order
from kiln.target import Target
from kiln.tir.expr import Var as TirVar
from kiln.topi.knobs import KnobSpace, applying

SMALL_CONSTANT = 64  # constants up to this many elements are part of the key (they may be shapes, axes)


def group_text(fn: Function) -> str:
    """A canonical text of a Primitive function: parameters by position, weights by shape only."""
    ids: dict[int, int] = {}
    lines = []
    for p in fn.params:
        ids[id(p)] = len(ids)
        lines.append(f"%{ids[id(p)]} = param {p.type}")
    for e in post_order(fn.body):
        if id(e) in ids:
            continue
        if isinstance(e, Constant):
            data = np.asarray(e.data)
            small = data.size <= SMALL_CONSTANT and data.dtype != object
            desc = f"const {data.dtype}{list(data.shape)}" + (f" {data.tobytes().hex()}" if small else "")
        elif isinstance(e, Call):
            op = e.op.name if isinstance(e.op, Op) else type(e.op).__name__
            desc = f"{op}({', '.join(_ref(ids, a) for a in e.args)}) {e.attrs!r} : {e.type}"
        elif isinstance(e, TupleGetItem):
            desc = f"{_ref(ids, e.tuple_value)}.{e.index}"
        elif isinstance(e, Tuple):
            desc = f"({', '.join(_ref(ids, f) for f in e.fields)})"
        elif isinstance(e, Var):
            desc = f"free {e.type}"
        else:
            desc = type(e).__name__
        ids[id(e)] = len(ids)
        lines.append(f"%{ids[id(e)]} = {desc}")
    lines.append(f"return {_ref(ids, fn.body)}")
    return "\n".join(lines)


def _ref(ids: dict[int, int], e) -> str:
    return f"%{ids[id(e)]}" if id(e) in ids else "_"


def workload_key(fn: Function, target: str) -> str:
    return hashlib.sha256(f"{group_text(fn)}\n@{target}".encode()).hexdigest()[:24]


def group_name(fn: Function) -> str:
    """A short human name: the group's operators and its first output shape."""
    ops = [e.op.name for e in post_order(fn.body) if isinstance(e, Call) and isinstance(e.op, Op)]
    t = fn.body.type
    shape = getattr(t.fields[0] if isinstance(t, TupleType) and t.fields else t, "shape", None)
    main = next((o for o in ops if o.startswith(("nn.", "linalg.", "reduce."))), ops[0] if ops else "group")
    more = f"+{len(ops) - 1}" if len(ops) > 1 else ""
    return f"{main}{more} {'x'.join(map(str, shape)) if shape else ''}".strip()


@dataclass
class Task:
    """One distinct tunable group: what the tuner measures under different knob configs."""

    key: str
    name: str
    fn: Function
    space: KnobSpace
    target: str
    weight: int = 1  # how many times the model calls this group
    kernel: Kernel | None = field(default=None, repr=False)  # lowered with the default config

    @property
    def default_config(self) -> dict[str, object]:
        return {name: default for name, (_, default) in self.space.knobs.items()}


def knob_space(fn: Function) -> tuple[KnobSpace, Kernel]:
    """The knobs the group's schedule asks for (its search space), and the default kernel."""
    space = KnobSpace()
    with applying({}, space):
        kernel = lower_primitive(fn, "probe")
    return space, kernel


def lower_with(fn: Function, name: str, config: Mapping[str, object] | None, passes: bool = True) -> Kernel:
    """The group lowered with its schedule reading knob values from `config` (passes=False: the loop
    nest before the tir passes, ten times cheaper to get)."""
    with applying(config or {}):
        return lower_primitive(fn, name, passes=passes)


def extract_tasks(fused: IRModule, target: str | None = None) -> list[Task]:
    """The distinct groups of a fused module that have knobs and static shapes, in order of first use.
    Groups that cannot be lowered are left out: the build runs them on the host anyway."""
    target = target or Target.host().key
    tasks: dict[str, Task] = {}
    for fn in _primitives(fused):
        key = workload_key(fn, target)
        if key in tasks:
            tasks[key].weight += _calls(fused, fn)
            continue
        try:
            space, kernel = knob_space(fn)
        except Exception:  # NOTE: as the build does, a group that cannot be lowered runs on the host: skip it
            continue
        if not space.knobs or any(isinstance(p, TirVar) for p in kernel.signature):
            continue  # nothing to tune, or symbolic sizes (fix them to tune)
        tasks[key] = Task(key, group_name(fn), fn, space, target, _calls(fused, fn), kernel)
    return list(tasks.values())


def _primitives(mod: IRModule) -> list[Function]:
    """Primitive functions in order of first use (as the executor's lowering meets them)."""
    out: dict[int, Function] = {}
    for f in mod.functions.values():
        for e in post_order(f):
            if isinstance(e, Function) and e.attr("Primitive"):
                out.setdefault(id(e), e)
    return list(out.values())


def _calls(mod: IRModule, fn: Function) -> int:
    n = sum(1 for f in mod.functions.values() for e in post_order(f) if isinstance(e, Call) and e.op is fn)
    return max(n, 1)
