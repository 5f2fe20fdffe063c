"""A tiny declarative pattern language for local rewrites, and the driver that applies them.

    relu_of_add = is_op("nn.relu")(is_op("math.add")(wildcard().named("x"), is_constant()))
    RULES = [Rule("drop-relu", relu_of_add, lambda m: m["x"])]
    out = apply_rules(fn, RULES)

A pattern matches one expression; patterns are shallow, so matching recurses over the pattern,
never over the expression. A name captured twice must bind the same node (identity), which is how
a pattern says "this value is shared". The driver rewrites bottom-up (iteratively, memoized) and
repeats whole sweeps to a fixpoint; a rewrite whose result does not keep the node's type (or only
refines unknown dims) is discarded, as is one whose construction fails type inference.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np

from kiln.errors import TypeInferenceError
from kiln.ir.attrs import value_equal
from kiln.ir.expr import Call, Constant, Expr, Op, Tuple, TupleGetItem, Var, children, is_absent
from kiln.ir.types import ANY, TensorType, TupleType, Type
from kiln.ir.visitor import post_order, with_children

COMMUTATIVE = frozenset({"math.add", "math.mul", "math.max", "math.min", "math.sum", "math.and",
                         "math.or", "math.xor", "math.equal"})
MANY = 1 << 30  # use count of a node whose consumers are not known exactly


@dataclass
class Match:
    """Captures of one successful match, plus the matched root and consumer counts of the graph."""

    root: Expr
    captures: dict[str, Expr] = field(default_factory=dict)
    uses: Callable[[Expr], int] = lambda e: MANY

    def __getitem__(self, name: str) -> Expr:
        return self.captures[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self.captures.get(name, default)

    def __contains__(self, name: str) -> bool:
        return name in self.captures


class Pattern:
    """Base class. `match(e, caps)` returns the extended captures dict, or None."""

    def match(self, e: Expr | None, caps: dict[str, Expr]) -> dict[str, Expr] | None:  # pragma: no cover
        raise NotImplementedError

    def named(self, name: str) -> Pattern:
        return _Named(self, name)

    def where(self, pred: Callable[[Expr], bool]) -> Pattern:
        return _Where(self, pred)

    def has_attr(self, **want: Any) -> Pattern:
        """The matched call's attributes have these field values."""
        return self.where(lambda e: isinstance(e, Call) and e.attrs is not None and all(
            hasattr(e.attrs, k) and value_equal(getattr(e.attrs, k), v) for k, v in want.items()))

    def has_dtype(self, *dtypes: str) -> Pattern:
        return self.where(lambda e: isinstance(e.type, TensorType) and e.type.dtype in dtypes)

    def has_rank(self, rank: int) -> Pattern:
        return self.where(lambda e: isinstance(e.type, TensorType) and e.type.ndim == rank)

    def has_type(self, pred: Callable[[Type], bool]) -> Pattern:
        return self.where(lambda e: pred(e.type))

    def __or__(self, other: Pattern) -> Pattern:
        return _Alt((self, other))


@dataclass(frozen=True, eq=False)
class _Wildcard(Pattern):
    def match(self, e, caps):
        return caps if e is not None else None


@dataclass(frozen=True, eq=False)
class _Named(Pattern):
    inner: Pattern
    name: str

    def match(self, e, caps):
        if e is None:
            return None
        bound = caps.get(self.name)
        if bound is not None and bound is not e:
            return None
        out = self.inner.match(e, caps)
        if out is None:
            return None
        return out if bound is not None else {**out, self.name: e}


@dataclass(frozen=True, eq=False)
class _Where(Pattern):
    inner: Pattern
    pred: Callable[[Expr], bool]

    def match(self, e, caps):
        out = self.inner.match(e, caps)
        return out if out is not None and self.pred(e) else None


@dataclass(frozen=True, eq=False)
class _Alt(Pattern):
    options: tuple[Pattern, ...]

    def match(self, e, caps):
        for p in self.options:
            out = p.match(e, caps)
            if out is not None:
                return out
        return None


@dataclass(frozen=True, eq=False)
class _Optional(Pattern):
    """An operator input that may be omitted (absent or past the end); else must match `inner`."""

    inner: Pattern

    def match(self, e, caps):
        if e is None or is_absent(e):
            return caps
        return self.inner.match(e, caps)


@dataclass(frozen=True, eq=False)
class OpPattern(Pattern):
    """Matches a call of one of the named operators (any arguments); call it to constrain them."""

    names: frozenset[str]

    def match(self, e, caps):
        return caps if isinstance(e, Call) and isinstance(e.op, Op) and e.op.name in self.names else None

    def __call__(self, *args: Pattern) -> CallPattern:
        return CallPattern(self, tuple(args))


@dataclass(frozen=True, eq=False)
class CallPattern(Pattern):
    """Arguments matched in order; for a commutative binary operator both orders are tried."""

    op: OpPattern
    args: tuple[Pattern, ...]

    def match(self, e, caps):
        if self.op.match(e, caps) is None:
            return None
        args = list(e.args)
        if len(args) > len(self.args):
            return None
        args += [None] * (len(self.args) - len(args))
        out = _match_all(self.args, args, caps)
        if out is None and len(args) == 2 and e.op.name in COMMUTATIVE:
            out = _match_all(self.args, args[::-1], caps)
        return out


def _match_all(pats: Sequence[Pattern], exprs: Sequence[Expr | None], caps):
    for p, a in zip(pats, exprs):
        caps = p.match(a, caps)
        if caps is None:
            return None
    return caps


@dataclass(frozen=True, eq=False)
class _ConstPattern(Pattern):
    """A Constant; with `value`, every element is close to it (within rtol of the dtype)."""

    value: float | None = None
    rtol: float | None = None

    def match(self, e, caps):
        if not isinstance(e, Constant):
            return None
        if self.value is None:
            return caps
        return caps if all_close(e, self.value, self.rtol) else None


@dataclass(frozen=True, eq=False)
class _TupleGetItemPattern(Pattern):
    tuple_value: Pattern
    index: int | None

    def match(self, e, caps):
        if not isinstance(e, TupleGetItem) or (self.index is not None and e.index != self.index):
            return None
        return self.tuple_value.match(e.tuple_value, caps)


@dataclass(frozen=True, eq=False)
class _KindPattern(Pattern):
    kind: type

    def match(self, e, caps):
        return caps if isinstance(e, self.kind) else None


def wildcard() -> Pattern:
    return _Wildcard()


def is_op(*names: str) -> OpPattern:
    return OpPattern(frozenset(names))


def is_constant(value: float | None = None, rtol: float | None = None) -> Pattern:
    return _ConstPattern(value, rtol)


def is_var() -> Pattern:
    return _KindPattern(Var)


def is_tuple() -> Pattern:
    return _KindPattern(Tuple)


def is_tuple_get_item(tuple_value: Pattern, index: int | None = None) -> Pattern:
    return _TupleGetItemPattern(tuple_value, index)


def optional(inner: Pattern | None = None) -> Pattern:
    return _Optional(inner or _Wildcard())


def omitted() -> Pattern:
    """An operator input that is omitted (absent, or past the end of the argument list)."""
    return _Optional(_Wildcard().where(lambda e: False))


def all_close(e: Constant, value: float, rtol: float | None = None) -> bool:
    """Every element of a numeric constant equals `value` (floats: within a few ulps of the dtype)."""
    data = e.data
    if data.size == 0 or data.dtype.kind in "cOSU":
        return False
    try:
        wide = data.astype(np.float64)
    except (TypeError, ValueError):
        return False
    if rtol is None:
        rtol = 0.0 if data.dtype.kind in "biu" else 4 * float(ml_dtypes.finfo(data.dtype).eps)
    return bool(np.all(np.abs(wide - value) <= rtol * abs(value)))


# ---------------------------------------------------------------------------------------------
# rules and the driver


@dataclass(frozen=True)
class Rule:
    """A named local rewrite: when `pattern` matches, `rewrite(match)` returns the replacement
    (or None to decline)."""

    name: str
    pattern: Pattern
    rewrite: Callable[[Match], Expr | None]
    ops: frozenset[str] | None = field(init=False, compare=False, repr=False)  # dispatch index

    def __post_init__(self):
        object.__setattr__(self, "ops", root_ops(self.pattern))


def type_refines(old: Type, new: Type) -> bool:
    """`new` is `old`, or `old` with unknown (ANY or unranked) parts made known."""
    if old == new:
        return True
    if isinstance(old, TensorType) and isinstance(new, TensorType):
        if old.dtype != new.dtype:
            return False
        if old.shape is None:
            return True
        return new.shape is not None and len(old.shape) == len(new.shape) and all(
            o == n or o == ANY for o, n in zip(old.shape, new.shape))
    if isinstance(old, TupleType) and isinstance(new, TupleType):
        return len(old.fields) == len(new.fields) and all(map(type_refines, old.fields, new.fields))
    return False


def count_uses(root: Expr) -> dict[int, int]:
    """id -> number of argument slots that refer to it (the root counts one use)."""
    uses: Counter = Counter({id(root): 1})
    for e in post_order(root):
        for c in children(e):
            uses[id(c)] += 1
    return uses


MAX_LOCAL = 16  # rewrites tried at one node within one sweep
MAX_SWEEPS = 64


def apply_rules(root: Expr, rules: Sequence[Rule], stats: Counter | None = None,
                max_sweeps: int = MAX_SWEEPS) -> Expr:
    """Rewrite `root` bottom-up with `rules` until a sweep changes nothing.

    `stats`, when given, counts applications per rule name (and `rejected:<name>` for rewrites
    discarded because they changed the type)."""
    for _ in range(max_sweeps):
        out = _sweep(root, rules, stats)
        if out is root:
            return out
        root = out
    return root


def _sweep(root: Expr, rules: Sequence[Rule], stats: Counter | None) -> Expr:
    old_uses = count_uses(root)
    uses: dict[int, int] = {}
    keep: list[Expr] = []  # keeps replaced nodes alive so their ids stay unique this sweep
    memo: dict[int, Expr] = {}

    def use_count(e: Expr) -> int:
        return uses.get(id(e), MANY)

    for e in post_order(root):
        new = with_children(e, tuple(memo[id(c)] for c in children(e)))
        _note_uses(uses, new, old_uses.get(id(e), MANY), e)
        for _ in range(MAX_LOCAL):
            rep = _first_rewrite(new, rules, use_count, stats)
            if rep is None:
                break
            keep.append(new)
            _note_uses(uses, rep, old_uses.get(id(e), MANY), None)
            new = rep
        memo[id(e)] = new
    return memo[id(root)]


def _note_uses(uses: dict[int, int], new: Expr, count: int, old: Expr | None) -> None:
    """Consumers of `new` are those of the node it replaces; an existing node gains consumers."""
    if new is old or id(new) not in uses:
        uses[id(new)] = count
    else:
        uses[id(new)] = MANY


def root_ops(p: Pattern) -> frozenset[str] | None:
    """Operator names a pattern's root can match (None: not only calls of named operators)."""
    if isinstance(p, OpPattern):
        return p.names
    if isinstance(p, CallPattern):
        return p.op.names
    if isinstance(p, (_Named, _Where)):
        return root_ops(p.inner)
    if isinstance(p, _Alt):
        sets = [root_ops(o) for o in p.options]
        return None if any(s is None for s in sets) else frozenset().union(*sets)
    return None


def _first_rewrite(e: Expr, rules: Sequence[Rule], use_count, stats: Counter | None) -> Expr | None:
    name = e.op.name if isinstance(e, Call) and isinstance(e.op, Op) else None
    for rule in rules:
        if rule.ops is not None and name not in rule.ops:
            continue
        caps = rule.pattern.match(e, {})
        if caps is None:
            continue
        try:
            rep = rule.rewrite(Match(e, caps, use_count))
        except TypeInferenceError:
            rep = None
        if rep is None or rep is e:
            continue
        if not type_refines(e.type, rep.type):
            if stats is not None:
                stats[f"rejected:{rule.name}"] += 1
            continue
        if stats is not None:
            stats[rule.name] += 1
        return rep
    return None


def int_list(e: Expr | None) -> list[int] | None:
    """The values of a constant integer vector (None when not a constant)."""
    if e is None or not isinstance(e, Constant) or e.data.dtype.kind not in "iu":
        return None
    return [int(v) for v in e.data.reshape(-1)]

