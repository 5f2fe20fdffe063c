"""Training: one optimizer step (Adagrad, Adam, SGD with momentum) over several tensors.

Inputs are the learning rate R, the update count T, then the optimized tensors grouped by
role (all X, then all G, then the per-optimizer states); outputs are the new X, then the new
states, in the same grouping. Each tensor is updated independently.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kiln.errors import TypeInferenceError
from kiln.ir.types import TensorType, TupleType
from kiln.op.registry import OPAQUE, define_op
from kiln.op.typerel import broadcast_shapes, check_dtype, tensor

REAL = ("float32", "float64")


def _optimizer_rel(roles: int, out_roles: tuple[int, ...]):
    """Type relation of an optimizer whose variadic inputs hold `roles` groups of n tensors;
    the outputs are the groups numbered in `out_roles` (0 = X), each of the group's types."""

    def rel(attrs, types, values) -> TupleType:
        check_dtype(tensor(types[0], "R"), REAL, "R")
        check_dtype(tensor(types[1], "T"), ("int64",), "T")
        for t, what in ((types[0], "R"), (types[1], "T")):
            if t.shape is not None and len(t.shape) > 1:
                raise TypeInferenceError(f"{what} must be a scalar, got shape {t.shape}")
        rest = [tensor(t, "optimized input") for t in types[2:]]
        if not rest or len(rest) % roles:
            raise TypeInferenceError(f"expects {roles} groups of equally many tensors after R and T, "
                                     f"got {len(rest)} tensors")
        n = len(rest) // roles
        groups = [rest[i * n:(i + 1) * n] for i in range(roles)]
        for i in range(n):
            ts = [g[i] for g in groups]
            for t in ts:
                check_dtype(t, REAL, "optimized input")
            if len({t.dtype for t in ts}) != 1:
                raise TypeInferenceError(f"tensor {i}: X, G and states must share a dtype")
            if broadcast_shapes(*(t.shape for t in ts)) != ts[0].shape and ts[0].shape is not None:
                raise TypeInferenceError(f"tensor {i}: G and states must broadcast to X's shape "
                                         f"{ts[0].shape}")
        return TupleType(tuple(TensorType(t.shape, t.dtype) for r in out_roles for t in groups[r]))

    return rel


def _optimizer_ref(roles: int, step):
    """Reference that splits the inputs into groups and runs `step` on each tensor's slice."""

    def ref(attrs, r, t, *rest):
        n = len(rest) // roles
        per = [step(attrs, float(r), int(t), *(rest[k * n + i] for k in range(roles))) for i in range(n)]
        return tuple(out[j].astype(rest[i].dtype) for j in range(roles - 1) for i, out in enumerate(per))

    return ref


# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AdagradAttrs:
    decay_factor: float = 0.0
    epsilon: float = 1e-6
    norm_coefficient: float = 0.0


def _adagrad_step(a: AdagradAttrs, r: float, t: int, x, g, h):
    lr = r / (1 + t * a.decay_factor)
    g = a.norm_coefficient * x + g
    h_new = h + g * g
    return x - lr * g / (np.sqrt(h_new) + a.epsilon), h_new


adagrad = define_op("train.adagrad", pattern=OPAQUE, inputs=(5, None), attrs=AdagradAttrs,
                    infer=_optimizer_rel(3, (0, 2)), ref=_optimizer_ref(3, _adagrad_step),
                    doc="Adagrad step: inputs R, T, X..., G..., H...; outputs X_new..., H_new....")


@dataclass(frozen=True)
class AdamAttrs:
    alpha: float = 0.9
    beta: float = 0.999
    epsilon: float = 1e-6
    norm_coefficient: float = 0.0
    norm_coefficient_post: float = 0.0


def _adam_step(a: AdamAttrs, r: float, t: int, x, g, v, h):
    g = a.norm_coefficient * x + g
    v_new = a.alpha * v + (1 - a.alpha) * g
    h_new = a.beta * h + (1 - a.beta) * g * g
    lr = r * np.sqrt(1 - a.beta ** t) / (1 - a.alpha ** t) if t > 0 else r
    x_new = x - lr * (v_new / (np.sqrt(h_new) + a.epsilon))
    return (1 - a.norm_coefficient_post) * x_new, v_new, h_new


adam = define_op("train.adam", pattern=OPAQUE, inputs=(6, None), attrs=AdamAttrs,
                 infer=_optimizer_rel(4, (0, 2, 3)), ref=_optimizer_ref(4, _adam_step),
                 doc="Adam step: inputs R, T, X..., G..., V..., H...; outputs X_new..., V_new..., "
                     "H_new....")


@dataclass(frozen=True)
class MomentumAttrs:
    alpha: float
    beta: float
    mode: str
    norm_coefficient: float

    def __post_init__(self):
        if self.mode not in ("standard", "nesterov"):
            raise ValueError(f"mode must be 'standard' or 'nesterov', got {self.mode!r}")


def _momentum_step(a: MomentumAttrs, r: float, t: int, x, g, v):
    g = a.norm_coefficient * x + g
    v_new = a.alpha * v + (a.beta if t > 0 else 1.0) * g
    step = g + a.alpha * v_new if a.mode == "nesterov" else v_new
    return x - r * step, v_new


momentum = define_op("train.momentum", pattern=OPAQUE, inputs=(5, None), attrs=MomentumAttrs,
                     infer=_optimizer_rel(3, (0, 2)), ref=_optimizer_ref(3, _momentum_step),
                     doc="SGD with standard or Nesterov momentum: inputs R, T, X..., G..., V...; "
                         "outputs X_new..., V_new....")
