"""ToMixedPrecision: compute the heavy float32 ops in float16 or bfloat16 (TVM's policy tables).

Each operator has a policy: ALWAYS (convolutions, matrix products: low-precision inputs, float32
accumulation inside the op), FOLLOW (elementwise, data movement: low precision when every
non-constant float input already is), NEVER (exp/log, reductions, softmax, normalizations,
losses: float32 in, float32 out). Casts go where precisions meet; float32 constants feeding a
low-precision op are converted here, at compile time. The function's signature never changes.
Config: PassContext.config["mixed_precision.dtype"] ("float16" default, or "bfloat16") and
["mixed_precision.policy"] (op name -> "ALWAYS" / "FOLLOW" / "NEVER") to override the tables.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

import numpy as np

from kiln.errors import TypeInferenceError
from kiln.ir import dtype as _dt
from kiln.ir.expr import Call, Constant, Expr, Function, If, Let, Tuple, TupleGetItem, Var, children
from kiln.ir.module import IRModule
from kiln.ir.types import TensorType, TupleType, Type
from kiln.ir.visitor import post_order, with_children
from kiln.op.registry import BROADCAST, ELEMWISE, INJECTIVE, OpDef, get_op
from kiln.transform.infra import PassContext, function_pass

LOW_DTYPES = ("float16", "bfloat16")


class Policy(enum.StrEnum):
    ALWAYS = "ALWAYS"
    FOLLOW = "FOLLOW"
    NEVER = "NEVER"


ALWAYS_OPS = frozenset({
    "nn.conv", "nn.conv_transpose", "linalg.mat_mul", "linalg.gemm", "linalg.einsum",
})
# exact or data-movement ops whose pattern alone would say NEVER
FOLLOW_OPS = frozenset({
    "nn.max_pool", "nn.average_pool", "nn.global_max_pool", "nn.global_average_pool",
    "reduce.max", "reduce.min", "reduce.arg_max", "reduce.arg_min", "tensor.shape", "tensor.size",
    "nn.dropout",
})
# range- or accumulation-sensitive ops whose pattern alone would say FOLLOW; everything that is
# not elementwise/broadcast/injective (reductions, softmax, normalizations, losses) is NEVER anyway
NEVER_OPS = frozenset({
    "math.exp", "math.fast_exp", "math.log", "math.pow", "math.reciprocal", "math.sinh", "math.cosh",
    "nn.softplus", "reduce.softmax", "reduce.log_softmax", "reduce.sum", "reduce.mean", "reduce.l1",
    "reduce.l2", "reduce.sum_square", "reduce.log_sum", "reduce.log_sum_exp", "reduce.prod",
    "nn.batch_normalization", "nn.layer_normalization", "nn.group_normalization",
    "nn.instance_normalization", "nn.rms_normalization", "nn.lp_normalization",
    "nn.mean_variance_normalization", "nn.lrn", "reduce.softmax_cross_entropy_loss",
    "reduce.negative_log_likelihood_loss",
})


def policy_of(op: OpDef, overrides: dict[str, Policy]) -> Policy:
    """Override, then the tables, then the fusion pattern (elementwise/injective follow)."""
    if op.name in overrides:
        return overrides[op.name]
    if op.name in ALWAYS_OPS:
        return Policy.ALWAYS
    if op.name in NEVER_OPS:
        return Policy.NEVER
    if op.name in FOLLOW_OPS or op.pattern in (ELEMWISE, BROADCAST, INJECTIVE):
        return Policy.FOLLOW
    return Policy.NEVER


def _is(t: Type, dtype: str) -> bool:
    return isinstance(t, TensorType) and t.dtype == dtype


def _compatible(new: Type, old: Type, low: str) -> bool:
    """`new` is `old` with some float32 tensors in `low` precision (the pass's invariant)."""
    if isinstance(old, TensorType):
        return (isinstance(new, TensorType) and new.shape == old.shape
                and (new.dtype == old.dtype or (old.dtype == "float32" and new.dtype == low)))
    if isinstance(old, TupleType):
        return (isinstance(new, TupleType) and len(new.fields) == len(old.fields)
                and all(_compatible(n, o, low) for n, o in zip(new.fields, old.fields)))
    return new == old


class _Converter:
    """One function's rewrite: new expression per old node, and the casts inserted so far."""

    def __init__(self, low: str, overrides: dict[str, Policy]):
        self.low, self.overrides = low, overrides
        self.cast_cache: dict[tuple[int, str], Expr] = {}
        self.cast_source: dict[int, Expr] = {}  # id(cast we inserted) -> its input
        self.low_consts: dict[int, Constant | None] = {}

    # -- casts -------------------------------------------------------------------------------
    def cast(self, e: Expr, to: str) -> Expr:
        src = self.cast_source.get(id(e))
        if src is not None and src.type.dtype == to:
            return src  # undo our own cast instead of stacking a second one
        key = (id(e), to)
        if key not in self.cast_cache:
            c = get_op("math.cast")(e, to=to)
            self.cast_cache[key] = c
            self.cast_source[id(c)] = e
        return self.cast_cache[key]

    def low_constant(self, c: Constant) -> Constant | None:
        """`c` converted to the low dtype, or None when a finite value would overflow it."""
        if id(c) not in self.low_consts:
            with np.errstate(over="ignore"):
                low = c.data.astype(_dt.to_numpy(self.low))
            fits = not np.any(np.isfinite(c.data) & ~np.isfinite(low.astype(np.float32)))
            self.low_consts[id(c)] = Constant(low) if fits else None
        return self.low_consts[id(c)]

    def restore(self, e: Expr, want: Type) -> Expr:
        """`e` converted back to type `want` (the original type of the value it replaces)."""
        if e.type == want:
            return e
        if isinstance(want, TensorType):
            return self.cast(e, want.dtype)
        if isinstance(want, TupleType):
            fields = e.fields if isinstance(e, Tuple) else tuple(TupleGetItem(e, i) for i in range(len(want.fields)))
            return Tuple(tuple(self.restore(f, w) for f, w in zip(fields, want.fields)))
        return e

    # -- calls -------------------------------------------------------------------------------
    def never(self, old: Call, args: tuple[Expr, ...]) -> Expr:
        new_args = tuple(self.restore(a, o.type) for a, o in zip(args, old.args))
        return with_children(old, new_args)

    def low_call(self, old: Call, args: tuple[Expr, ...], policy: Policy) -> Expr:
        """ALWAYS/FOLLOW: non-constant float32 inputs in low precision (FOLLOW: only if they
        already are); float32 constants converted too when the op needs one dtype."""
        floats = [i for i, a in enumerate(old.args) if _is(a.type, "float32")]
        data = [i for i in floats if not isinstance(args[i], Constant)]
        if not data or (policy is Policy.FOLLOW and any(_is(args[i].type, "float32") for i in data)):
            return self.never(old, args)
        new_args = list(args)
        for i in data:
            new_args[i] = self.cast(args[i], self.low) if _is(args[i].type, "float32") else args[i]
        out = self._try(old, new_args)
        if out is None:
            for i in floats:
                if isinstance(args[i], Constant):
                    c = self.low_constant(args[i])
                    if c is None:
                        return self.never(old, args)
                    new_args[i] = c
            out = self._try(old, new_args)
        return out if out is not None else self.never(old, args)

    def _try(self, old: Call, args: list[Expr]) -> Call | None:
        try:
            new = Call(old.op, tuple(args), old.attrs, old.name)
        except TypeInferenceError:
            return None
        return new if _compatible(new.type, old.type, self.low) else None

    def call(self, old: Call, args: tuple[Expr, ...]) -> Expr:
        if not isinstance(old.op, OpDef):
            params = old.op.type.params  # a call of a function value: its signature is unchanged
            return with_children(old, (args[0],) + tuple(self.restore(a, p) for a, p in zip(args[1:], params)))
        rule = MIXED_PRECISION_RULES.get(old.op.name)
        if rule is not None:
            return rule(self, old, args)
        policy = policy_of(old.op, self.overrides)
        return self.never(old, args) if policy is Policy.NEVER else self.low_call(old, args, policy)

    # -- whole function ----------------------------------------------------------------------
    def run(self, fn: Function) -> Function:
        order = post_order(fn)
        let_value = {id(e.var): e.value for e in order if isinstance(e, Let)}
        waiting: dict[int, list[Var]] = {}
        memo: dict[int, Expr] = {}

        def bind(var: Var) -> None:
            value = memo[id(let_value[id(var)])]
            memo[id(var)] = var if value.type == var.type else Var(var.name, value.type)

        for e in order:  # a let's var comes before its value: it is bound once the value is done
            if id(e) in let_value:
                if id(let_value[id(e)]) in memo:
                    bind(e)
                else:
                    waiting.setdefault(id(let_value[id(e)]), []).append(e)
                continue
            kids = tuple(memo[id(c)] for c in children(e))
            memo[id(e)] = self.node(e, kids)
            for var in waiting.pop(id(e), ()):
                bind(var)
        return memo[id(fn)]

    def node(self, old: Expr, kids: tuple[Expr, ...]) -> Expr:
        if isinstance(old, Call):
            return self.call(old, kids)
        if isinstance(old, If):
            cond, then, other = kids
            if then.type != other.type:
                then, other = self.restore(then, old.then_branch.type), self.restore(other, old.else_branch.type)
            return with_children(old, (self.restore(cond, old.cond.type), then, other))
        if isinstance(old, Function):
            return with_children(old, kids[:-1] + (self.restore(kids[-1], old.body.type),))
        if isinstance(old, (Tuple, TupleGetItem, Let)):
            return with_children(old, kids)
        return old


def _cast_rule(conv: _Converter, old: Call, args: tuple[Expr, ...]) -> Expr:
    """A float32 -> float32 cast of a low value is that value; a cast to another float takes the
    low value directly; a cast to a non-float restores float32 first (exact integer parts)."""
    (x,) = args
    to = old.attrs.to
    if x.type == old.args[0].type:
        return with_children(old, args)
    if to == "float32" and old.args[0].type.dtype == "float32":
        return x
    if to in _dt.FLOATS:
        return with_children(old, args)
    return conv.never(old, args)


# op name -> rule that replaces the policy for it
MIXED_PRECISION_RULES: dict[str, Callable[[_Converter, Call, tuple[Expr, ...]], Expr]] = {
    "math.cast": _cast_rule,
}


def _read_config(ctx: PassContext) -> tuple[str, dict[str, Policy]]:
    low = ctx.config.get("mixed_precision.dtype", "float16")
    if low not in LOW_DTYPES:
        raise ValueError(f"mixed_precision.dtype is {low!r}; expected one of {', '.join(LOW_DTYPES)}")
    overrides = {}
    for name, p in dict(ctx.config.get("mixed_precision.policy", {})).items():
        try:
            overrides[name] = Policy(p.upper() if isinstance(p, str) else p)
        except ValueError:
            raise ValueError(f"mixed_precision.policy[{name!r}] is {p!r}; expected ALWAYS, FOLLOW or NEVER") from None
    return low, overrides


@function_pass("to-mixed-precision", opt_level=4, config=("mixed_precision.dtype", "mixed_precision.policy"))
def to_mixed_precision(fn: Function, mod: IRModule, ctx: PassContext) -> Function:
    """Run the policy tables over `fn`; its parameter and result types stay as they were."""
    low, overrides = _read_config(ctx)
    return _Converter(low, overrides).run(fn)
