"""Random generators. A given `seed` makes results reproducible (a numpy Generator seeded from
the seed's float bits); without one every run draws fresh values.

NOTE: these references are not pure functions of their inputs when `seed` is None: passes must
not constant-fold them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kiln.errors import TypeInferenceError
from kiln.ir import dtype as dt
from kiln.ir.types import TensorType
from kiln.op.registry import OPAQUE, define_op
from kiln.op.typerel import check_dtype, tensor

REAL = ("float16", "bfloat16", "float32", "float64")


def rng(seed: float | None) -> np.random.Generator:
    """A generator seeded by the seed's exact float64 bits (distinct seeds, distinct streams)."""
    if seed is None:
        return np.random.default_rng()
    return np.random.default_rng(int(np.float64(seed).view(np.uint64)))


def _out_dtype(attr: str | None, x: TensorType, allowed: tuple[str, ...]) -> str:
    """The `dtype` attribute when given, else the input's dtype."""
    out = attr if attr is not None else x.dtype
    if out not in allowed:
        raise TypeInferenceError(f"output dtype {out} is not one of {', '.join(allowed)}")
    return out


# ---------------------------------------------------------------------------------------------
# normal and uniform


@dataclass(frozen=True)
class RandomNormalAttrs:
    shape: tuple[int, ...]
    dtype: str = "float32"
    mean: float = 0.0
    scale: float = 1.0
    seed: float | None = None


@dataclass(frozen=True)
class RandomNormalLikeAttrs:
    dtype: str | None = None
    mean: float = 0.0
    scale: float = 1.0
    seed: float | None = None


@dataclass(frozen=True)
class RandomUniformAttrs:
    shape: tuple[int, ...]
    dtype: str = "float32"
    high: float = 1.0
    low: float = 0.0
    seed: float | None = None


@dataclass(frozen=True)
class RandomUniformLikeAttrs:
    dtype: str | None = None
    high: float = 1.0
    low: float = 0.0
    seed: float | None = None


def _fixed_rel(attrs, types, values) -> TensorType:
    if any(d < 0 for d in attrs.shape):
        raise TypeInferenceError(f"shape {attrs.shape} has a negative dim")
    return TensorType(attrs.shape, _out_dtype(attrs.dtype, None, REAL))


def _like_rel(attrs, types, values) -> TensorType:
    x = tensor(types[0])
    return TensorType(x.shape, _out_dtype(attrs.dtype, x, REAL))


def _normal(attrs, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    return rng(attrs.seed).normal(attrs.mean, attrs.scale, shape).astype(dt.to_numpy(dtype))


def _uniform(attrs, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    return rng(attrs.seed).uniform(attrs.low, attrs.high, shape).astype(dt.to_numpy(dtype))


random_normal = define_op("random.random_normal", pure=False, pattern=OPAQUE, inputs=0, attrs=RandomNormalAttrs,
                          host_only=True, infer=_fixed_rel, ref=lambda a: _normal(a, a.shape, a.dtype),
                          doc="Samples of N(mean, scale^2) of the given shape.")
random_normal_like = define_op("random.random_normal_like", pure=False, pattern=OPAQUE, attrs=RandomNormalLikeAttrs,
                               host_only=True, infer=_like_rel,
                               ref=lambda a, x: _normal(a, x.shape, a.dtype or dt.from_numpy(x.dtype)),
                               doc="Samples of N(mean, scale^2) shaped like the input.")
random_uniform = define_op("random.random_uniform", pure=False, pattern=OPAQUE, inputs=0, attrs=RandomUniformAttrs,
                           host_only=True, infer=_fixed_rel, ref=lambda a: _uniform(a, a.shape, a.dtype),
                           doc="Samples of U[low, high) of the given shape.")
random_uniform_like = define_op("random.random_uniform_like", pure=False, pattern=OPAQUE, attrs=RandomUniformLikeAttrs,
                                host_only=True, infer=_like_rel,
                                ref=lambda a, x: _uniform(a, x.shape, a.dtype or dt.from_numpy(x.dtype)),
                                doc="Samples of U[low, high) shaped like the input.")


# ---------------------------------------------------------------------------------------------
# Bernoulli and Multinomial


@dataclass(frozen=True)
class BernoulliAttrs:
    dtype: str | None = None
    seed: float | None = None


def _bernoulli_rel(attrs: BernoulliAttrs, types, values) -> TensorType:
    x = tensor(types[0])
    check_dtype(x, REAL)
    return TensorType(x.shape, _out_dtype(attrs.dtype, x, REAL + dt.INTS + ("bool",)))


def _bernoulli_ref(attrs: BernoulliAttrs, p):
    out = rng(attrs.seed).random(p.shape) < p.astype(np.float64)
    return out.astype(dt.to_numpy(attrs.dtype or dt.from_numpy(p.dtype)))


bernoulli = define_op("random.bernoulli", pure=False, pattern=OPAQUE, attrs=BernoulliAttrs, infer=_bernoulli_rel,
                      host_only=True, ref=_bernoulli_ref, doc="1 with probability p (the input), else 0, per element.")


@dataclass(frozen=True)
class MultinomialAttrs:
    dtype: str = "int32"
    sample_size: int = 1
    seed: float | None = None


def _multinomial_rel(attrs: MultinomialAttrs, types, values) -> TensorType:
    x = tensor(types[0])
    check_dtype(x, REAL)
    if x.shape is not None and len(x.shape) != 2:
        raise TypeInferenceError(f"input must have shape [batch, classes], got {x.shape}")
    if attrs.dtype not in ("int32", "int64") or attrs.sample_size < 1:
        raise TypeInferenceError(f"dtype must be int32/int64 and sample_size >= 1, got {attrs.dtype}, "
                                 f"{attrs.sample_size}")
    return TensorType(None if x.shape is None else (x.shape[0], attrs.sample_size), attrs.dtype)


def _multinomial_ref(attrs: MultinomialAttrs, logits):
    """Draw class indices from softmax(logits) per row, by inverting the cumulative distribution."""
    z = logits.astype(np.float64)
    cdf = np.cumsum(np.exp(z - z.max(axis=1, keepdims=True)), axis=1)
    u = rng(attrs.seed).random((z.shape[0], attrs.sample_size)) * cdf[:, -1:]
    picks = np.stack([np.searchsorted(c, row, side="right") for c, row in zip(cdf, u)]) if len(z) else u
    return np.minimum(picks, z.shape[1] - 1).astype(dt.to_numpy(attrs.dtype))


multinomial = define_op("random.multinomial", host_only=True, pure=False, pattern=OPAQUE, attrs=MultinomialAttrs,
                        infer=_multinomial_rel,
                        ref=_multinomial_ref,
                        doc="sample_size class indices per row, drawn from softmax of the unnormalized "
                            "log-probabilities.")
