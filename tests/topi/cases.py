"""Hand-written cases for computes the registry test cannot generate: op name -> rng -> list of
(attrs, input arrays (None: omitted), indices of constant inputs[, outputs to compare])."""

from __future__ import annotations

import numpy as np

from kiln.op import get_op
from tests.topi.harness import rand

I64 = np.int64


def A(name: str, **kw):
    return get_op(name).attrs_type(**kw)


def i64(*v) -> np.ndarray:
    return np.array(v, I64)


def _f(rng, *shape, dtype="float32"):
    return rand(shape, dtype, rng)


def _conv(rng):
    out = []
    for dims, kw in (((5,), {}), ((7, 6), dict(strides=(2, 1), pads=(1, 0, 2, 1), dilations=(1, 2))),
                     ((5, 4), dict(auto_pad="SAME_UPPER", strides=(2, 2))), ((5, 4), dict(auto_pad="SAME_LOWER")),
                     ((5, 4), dict(auto_pad="VALID", group=2)), ((4, 3, 5), dict(pads=(1, 0, 1, 0, 1, 1)))):
        g = kw.get("group", 1)
        k = (3,) * len(dims) if len(dims) < 3 else (2, 2, 3)
        b = _f(rng, 4) if len(out) % 2 else None
        out.append((A("nn.conv", **kw), [_f(rng, 2, 2 * g, *dims), _f(rng, 4, 2, *k), b], ()))
    return out


def _conv_t(rng):
    out = []
    for dims, kw in (((3,), dict(strides=(2,))), ((3, 4), dict(strides=(2, 3), pads=(1, 0, 0, 1), output_padding=(1, 0))),
                     ((3, 3), dict(auto_pad="SAME_UPPER", strides=(2, 2), group=2)), ((3, 2), dict(dilations=(2, 1))),
                     ((2, 3), dict(output_shape=(5, 8), strides=(2, 3)))):
        g = kw.get("group", 1)
        out.append((A("nn.conv_transpose", **kw), [_f(rng, 2, 2 * g, *dims), _f(rng, 2 * g, 3, *(2,) * len(dims)),
                                                  _f(rng, 3 * g)], ()))
    return out


def _pools(name, **extra):
    def cases(rng):
        out = []
        for dims, kw in (((7,), dict(kernel_shape=(3,), strides=(2,))),
                         ((6, 7), dict(kernel_shape=(3, 2), pads=(1, 0, 1, 1), ceil_mode=1, strides=(2, 2))),
                         ((5, 5), dict(kernel_shape=(2, 2), auto_pad="SAME_LOWER", strides=(2, 2))),
                         ((6, 5), dict(kernel_shape=(2, 2), dilations=(2, 1), auto_pad="SAME_UPPER")),
                         ((3, 4, 5), dict(kernel_shape=(2, 2, 2)))):
            if name == "nn.average_pool" and "pads" in kw:
                out.append((A(name, count_include_pad=1, **kw), [_f(rng, 2, 3, *dims)], ()))
            out.append((A(name, **kw, **extra), [_f(rng, 2, 3, *dims)], ()))
        return out

    return cases


CASES = {
    "math.cast": lambda rng: [(A("math.cast", to=t), [rand((3, 5), s, rng)], ())
                              for s, t in (("float32", "int32"), ("int32", "float16"), ("float64", "float32"),
                                           ("int64", "uint8"), ("float32", "bool"), ("bool", "float32"),
                                           ("float32", "float8_e4m3fn"))],
    "math.bit_cast": lambda rng: [(A("math.bit_cast", to=t), [rand((3, 5), s, rng)], ())
                                  for s, t in (("float32", "int32"), ("int64", "float64"), ("uint8", "int8"))],
    "math.bit_shift": lambda rng: [(A("math.bit_shift", direction=d), [rand((4, 3), t, rng, -90, 90),
                                                                      rand((3,), t, rng, -2, 70)], ())
                                   for d in ("LEFT", "RIGHT") for t in ("int8", "uint8", "int64", "uint32")],
    "math.mod": lambda rng: [(A("math.mod", fmod=f), [rand((3, 4), t, rng), np.where(y == 0, 5, y).astype(y.dtype)], ())
                             for f in (0, 1) for t in ("int32", "float32", "int8") for y in [rand((4,), t, rng)]
                             if f or t != "float32"],
    "math.is_inf": lambda rng: [(A("math.is_inf", detect_negative=n, detect_positive=p),
                                 [np.array([1, np.inf, -np.inf, np.nan, 0], np.float32)], ())
                                for n in (0, 1) for p in (0, 1)],
    "nn.gelu": lambda rng: [(A("nn.gelu", approximate=a), [_f(rng, 3, 5, dtype=t)], ())
                            for a in ("none", "tanh") for t in ("float32", "float64", "float16")],
    "nn.celu": lambda rng: [(A("nn.celu", alpha=0.7), [_f(rng, 3, 5)], ())],
    "nn.elu": lambda rng: [(A("nn.elu", alpha=0.5), [_f(rng, 13)], ())],
    "nn.selu": lambda rng: [(A("nn.selu"), [_f(rng, 2, 7, dtype="float64")], ())],
    "nn.hard_sigmoid": lambda rng: [(A("nn.hard_sigmoid", alpha=0.3, beta=0.4), [_f(rng, 11)], ())],
    "nn.leaky_relu": lambda rng: [(A("nn.leaky_relu", alpha=0.2), [_f(rng, 3, 1, dtype=t)], ())
                                  for t in ("float32", "float16")],
    "nn.shrink": lambda rng: [(A("nn.shrink", bias=1.5, lambd=1.0), [rand((9,), t, rng)], ())
                              for t in ("float32", "int32", "int8")],
    "nn.swish": lambda rng: [(A("nn.swish", alpha=1.5), [_f(rng, 3, 5)], ())],
    "nn.thresholded_relu": lambda rng: [(A("nn.thresholded_relu", alpha=0.5), [_f(rng, 3, 5)], ())],
    "nn.swiglu": lambda rng: [(A("nn.swiglu", alpha=1.3), [_f(rng, 3, 5), _f(rng, 3, 5)], ())],
    "math.clip": lambda rng: [(None, [_f(rng, 3, 5), np.array(-1.0, np.float32), np.array(2.0, np.float32)], ()),
                              (None, [rand((7,), "int32", rng), None, np.array([4], np.int32)], ()),
                              (None, [_f(rng, 2, 3), np.array(1.0, np.float32)], ())],
    "math.where": lambda rng: [(None, [rand((3, 1), "bool", rng), rand((4,), t, rng), rand((1, 4), t, rng)], ())
                               for t in ("float32", "int64", "bool")],
    "linalg.mat_mul": lambda rng: [(None, [rand(a, t, rng), rand(b, t, rng)], ())
                                   for a, b in (((3, 4), (4, 5)), ((4,), (4, 3)), ((2, 3, 4), (4,)), ((5,), (5,)),
                                                ((2, 1, 3, 4), (3, 4, 2)), ((1, 3, 4), (2, 4, 1)))
                                   for t in ("float32", "int32")],
    "linalg.gemm": lambda rng: [(A("linalg.gemm", alpha=al, beta=be, transA=ta, transB=tb),
                                 [_f(rng, *((4, 3) if ta else (3, 4))), _f(rng, *((5, 4) if tb else (4, 5))), c], ())
                                for ta in (0, 1) for tb in (0, 1) for al, be in ((1.0, 1.0), (0.5, 2.0))
                                for c in (None, _f(rng, 5), _f(rng, 3, 1), _f(rng, 3, 5))],
    "nn.conv": _conv,
    "nn.conv_transpose": _conv_t,
    "nn.max_pool": lambda rng: _pools("nn.max_pool")(rng) + [
        (A("nn.max_pool", kernel_shape=(2, 2), storage_order=1, strides=(2, 1)), [rand((1, 2, 5, 4), "int8", rng)], ()),
        (A("nn.max_pool", kernel_shape=(3, 3), pads=(1, 1, 1, 1)), [_f(rng, 1, 1, 4, 4, dtype="float16")], ())],
    "nn.average_pool": _pools("nn.average_pool"),
    "nn.lp_pool": _pools("nn.lp_pool", p=3),
    "nn.global_average_pool": lambda rng: [(None, [_f(rng, 2, 3, *s)], ()) for s in ((5,), (4, 3), (1, 2, 3))],
    "nn.global_max_pool": lambda rng: [(None, [rand((2, 3, 4, 5), t, rng)], ()) for t in ("float32", "int8")],
    "nn.global_lp_pool": lambda rng: [(A("nn.global_lp_pool", p=p), [_f(rng, 2, 3, 4, 5)], ()) for p in (1, 2, 3)],
    "nn.lrn": lambda rng: [(A("nn.lrn", size=s, alpha=1e-2, beta=0.6, bias=1.5), [_f(rng, 2, 7, 3, 2)], ())
                           for s in (1, 3, 4)],
    "nn.batch_normalization": lambda rng: [(A("nn.batch_normalization", epsilon=1e-3),
                                            [_f(rng, 2, 3, 4, 5), _f(rng, 3), _f(rng, 3), _f(rng, 3),
                                             np.abs(_f(rng, 3))], ())],
    "nn.instance_normalization": lambda rng: [(A("nn.instance_normalization"), [_f(rng, 2, 3, *s), _f(rng, 3),
                                                                                _f(rng, 3)], ()) for s in ((5,), (4, 3))],
    "nn.layer_normalization": lambda rng: [(A("nn.layer_normalization", axis=ax), [_f(rng, 2, 3, 5), _f(rng, *sc), b], ())
                                           for ax, sc in ((-1, (5,)), (1, (3, 5)), (0, (1, 5)))
                                           for b in (None, _f(rng, 5))],
    "nn.rms_normalization": lambda rng: [(A("nn.rms_normalization", axis=ax), [_f(rng, 2, 3, 5), _f(rng, *sc)], ())
                                         for ax, sc in ((-1, (5,)), (1, (3, 5)))],
    "nn.group_normalization": lambda rng: [(A("nn.group_normalization", num_groups=g), [_f(rng, 2, 6, 5), _f(rng, 6),
                                                                                        _f(rng, 6)], ()) for g in (1, 2, 3)],
    "nn.lp_normalization": lambda rng: [(A("nn.lp_normalization", axis=ax, p=p), [x], ())
                                        for ax in (0, -1) for p in (1, 2)
                                        for x in [np.concatenate([_f(rng, 2, 5), np.zeros((1, 5), np.float32)])]],
    "nn.mean_variance_normalization": lambda rng: [(A("nn.mean_variance_normalization", axes=ax), [_f(rng, 2, 3, 4, 5)], ())
                                                   for ax in ((0, 2, 3), (1,), (-1, 0))],
    "nn.dropout": lambda rng: [(A("nn.dropout"), [_f(rng, 3, 5)], ()),
                               (A("nn.dropout"), [_f(rng, 3, 5), np.array(0.3, np.float32), np.array(False)], (1, 2))],
}


def _reduce_cases(name):
    def cases(rng):
        out = []
        dtypes = ("float32", "int32", "float16") + (("bool",) if name in ("reduce.max", "reduce.min") else ())
        for t in dtypes:
            x = rand((3, 1, 5), t, rng, 1, 9) if name == "reduce.log_sum" else rand((3, 1, 5), t, rng, -4, 4)
            for axes in (None, i64(1), i64(0, -1), i64()):
                for kd in (0, 1):
                    for noop in ((0, 1) if axes is not None and axes.size == 0 else (0,)):
                        attrs = A(name, keepdims=kd, noop_with_empty_axes=noop)
                        out.append((attrs, [x] if axes is None else [x, axes], (1,)))
        return out

    return cases


for _k in ("sum", "mean", "max", "min", "prod", "l1", "l2", "log_sum", "log_sum_exp", "sum_square"):
    CASES[f"reduce.{_k}"] = _reduce_cases(f"reduce.{_k}")

for _k in ("arg_max", "arg_min"):
    CASES[f"reduce.{_k}"] = lambda rng, _k=_k: [
        (A(f"reduce.{_k}", axis=ax, keepdims=kd, select_last_index=sl), [rand((3, 4, 5), t, rng, -2, 2)], ())
        for ax in (0, -1) for kd in (0, 1) for sl in (0, 1) for t in ("float32", "int8")]
for _k in ("cum_sum", "cum_prod"):
    CASES[f"reduce.{_k}"] = lambda rng, _k=_k: [
        (A(f"reduce.{_k}", exclusive=e, reverse=r), [rand((3, 5), t, rng, -3, 3), np.array(ax)], (1,))
        for e in (0, 1) for r in (0, 1) for ax in (0, -1) for t in ("float32", "int32")]
for _k in ("softmax", "log_softmax", "hardmax"):
    CASES[f"reduce.{_k}"] = lambda rng, _k=_k: [
        (A(f"reduce.{_k}", axis=ax, coerce_2d=c), [rand((2, 3, 5), t, rng)], ())
        for ax in (0, 1, -1) for c in (0, 1) for t in ("float32", "float16", "float64")]

from tests.topi.cases_tensor import TENSOR_CASES  # noqa: E402

CASES.update(TENSOR_CASES())
from tests.topi.cases_more import MORE_CASES  # noqa: E402

CASES.update(MORE_CASES())
from tests.topi.cases_loss import LOSS_CASES  # noqa: E402

CASES.update(LOSS_CASES())
from tests.topi.cases_more2 import MORE2_CASES  # noqa: E402

CASES.update(MORE2_CASES())
from tests.topi.cases_vision_tensor import VISION_TENSOR_CASES  # noqa: E402

CASES.update(VISION_TENSOR_CASES())
from tests.topi.cases_rnn import RNN_CASES  # noqa: E402

CASES.update(RNN_CASES())
from tests.topi.cases_dense_packed import DENSE_PACKED_CASES  # noqa: E402

CASES.update(DENSE_PACKED_CASES())
from tests.topi.cases_numeric import NUMERIC_CASES  # noqa: E402

CASES.update(NUMERIC_CASES())
from tests.topi.cases_quant_narrow import QUANT_NARROW_CASES  # noqa: E402

CASES.update(QUANT_NARROW_CASES())
from tests.topi.cases_state import STATE_CASES  # noqa: E402

CASES.update(STATE_CASES())
from tests.topi.cases_last_numeric import LAST_NUMERIC_CASES  # noqa: E402

CASES.update(LAST_NUMERIC_CASES())
from tests.topi.cases_layout import LAYOUT_CASES  # noqa: E402

CASES.update(LAYOUT_CASES())
from tests.topi.cases_int8 import INT8_CASES  # noqa: E402

CASES.update(INT8_CASES())
