"""The reference interpreter: runs any IRModule with the operators' numpy references.

It is the reference semantics for everything later (constant folding, pass and codegen
differential tests). Evaluation uses an explicit stack, so a 10,000-node chain is fine; If
evaluates only the branch taken; a Function evaluates to a Closure that operators such as
Loop and Scan call.

Values: tensors are numpy arrays, tuples are Python tuples, sequences Python lists, an empty
optional is None.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.errors import EvaluationError, InputError, KilnError, MemoryLimitError
from kiln.ir import dtype as _dt
from kiln.ir.expr import Call, Constant, Expr, Function, GlobalVar, If, Let, Op, Tuple, TupleGetItem, Var
from kiln.ir.input_check import check_input
from kiln.ir.module import IRModule
from kiln.ir.sizes import check_alloc
from kiln.ir.types import TensorType, TupleType, Type


class Scope:
    """Values of evaluated expressions, keyed by node identity, with a parent for closures."""

    __slots__ = ("values", "parent")

    def __init__(self, parent: Scope | None = None):
        self.values: dict[int, Any] = {}
        self.parent = parent

    def lookup(self, e: Expr) -> tuple[bool, Any]:
        s: Scope | None = self
        k = id(e)
        while s is not None:
            if k in s.values:
                return True, s.values[k]
            s = s.parent
        return False, None


class Closure:
    """A Function value: callable with argument values, evaluated in its defining scope."""

    def __init__(self, fn: Function, scope: Scope, interp: Interpreter):
        self.fn, self.scope, self.interp = fn, scope, interp

    @property
    def type(self) -> Type:
        """The function's FuncType (e.g. to shape the outputs of a loop that runs zero times)."""
        return self.fn.type

    def __call__(self, *args: Any) -> Any:
        if len(args) != len(self.fn.params):
            raise EvaluationError(f"function expects {len(self.fn.params)} arguments, got {len(args)}")
        inner = Scope(self.scope)
        for p, a in zip(self.fn.params, args):
            inner.values[id(p)] = a
        return self.interp.eval(self.fn.body, inner)


class Interpreter:
    def __init__(self, mod: IRModule | None = None):
        self.mod = mod

    def eval(self, root: Expr, scope: Scope) -> Any:
        stack: list[Expr] = [root]
        while stack:
            e = stack[-1]
            found, _ = scope.lookup(e)
            if found:
                stack.pop()
                continue
            need = self._pending(e, scope)
            if need is not None:
                stack.append(need)
                continue
            scope.values[id(e)] = self._compute(e, scope)
            stack.pop()
        return scope.lookup(root)[1]

    def _pending(self, e: Expr, scope: Scope) -> Expr | None:
        """The first dependency of `e` not yet evaluated, or None when `e` is ready."""
        if isinstance(e, If):
            ok, cond = scope.lookup(e.cond)
            if not ok:
                return e.cond
            branch = e.then_branch if _truth(cond) else e.else_branch
            return None if scope.lookup(branch)[0] else branch
        if isinstance(e, Let):
            ok, val = scope.lookup(e.value)
            if not ok:
                return e.value
            scope.values[id(e.var)] = val
            return None if scope.lookup(e.body)[0] else e.body
        if isinstance(e, (Function, Var, GlobalVar, Constant)):
            return None
        deps: tuple[Expr, ...]
        if isinstance(e, Call):
            deps = ((e.op,) if isinstance(e.op, Expr) else ()) + e.args
        elif isinstance(e, Tuple):
            deps = e.fields
        elif isinstance(e, TupleGetItem):
            deps = (e.tuple_value,)
        else:
            raise EvaluationError(f"cannot evaluate {type(e).__name__}")
        for d in deps:
            if not scope.lookup(d)[0]:
                return d
        return None

    def _compute(self, e: Expr, scope: Scope) -> Any:
        get = lambda x: scope.lookup(x)[1]  # noqa: E731
        if isinstance(e, Constant):
            return e.data
        if isinstance(e, Var):
            raise EvaluationError(f"unbound variable %{e.name}")
        if isinstance(e, GlobalVar):
            if self.mod is None or e.name not in self.mod.functions:
                raise EvaluationError(f"unknown global function @{e.name}")
            return Closure(self.mod.functions[e.name], Scope(), self)
        if isinstance(e, Function):
            return Closure(e, scope, self)
        if isinstance(e, Tuple):
            return tuple(get(f) for f in e.fields)
        if isinstance(e, TupleGetItem):
            return get(e.tuple_value)[e.index]
        if isinstance(e, If):
            return get(e.then_branch if _truth(get(e.cond)) else e.else_branch)
        if isinstance(e, Let):
            return get(e.body)
        if isinstance(e, Call):
            args = [get(a) for a in e.args]
            if isinstance(e.op, Op):
                return run_op(e.op, e.attrs, args, e.name, e.type)
            return get(e.op)(*args)
        raise EvaluationError(f"cannot evaluate {type(e).__name__}")


def run_op(op: Any, attrs: Any, args: list[Any], node: str = "", out_type: Type | None = None) -> Any:
    """Run one operator's reference; an omitted optional input (`()`) is passed as None. Its outputs
    are checked against the memory bound first (kiln.ir.sizes): from `out_type` when that is static,
    else from the type relation on the actual arguments."""
    vals = [None if (isinstance(a, tuple) and not a) else a for a in args]
    where = f" (node '{node}')" if node else ""
    _check_outputs(out_type if _is_static(out_type) else _type_of_values(op, attrs, vals), f"{op.name}{where}")
    try:
        return op.reference(attrs, *vals)
    except KilnError:
        raise
    except MemoryError as exc:  # a size no relation knew ahead (a bound the check above cannot see)
        raise MemoryLimitError(f"{op.name}{where}: {exc}") from None
    except Exception as exc:  # an op failing on its inputs is the user's data or a Kiln bug: name it
        raise EvaluationError(f"{op.name}{where} failed: {type(exc).__name__}: {exc}") from exc


SMALL_VALUE = 64  # argument values up to this many elements reach the type relation (shapes, scalars)


def _is_static(t: Type | None) -> bool:
    if isinstance(t, TupleType):
        return all(_is_static(f) for f in t.fields)
    return isinstance(t, TensorType) and t.is_static


def _type_of_values(op: Any, attrs: Any, vals: list[Any]) -> Type | None:
    """The op's output type on these tensors (their shapes, and the values of small ones); None when
    an argument is no tensor or the relation cannot tell (the reference then decides)."""
    if not all(v is None or isinstance(v, np.ndarray) for v in vals):
        return None
    _, hi = op.num_inputs
    pad = [None] * ((hi if hi is not None else len(vals)) - len(vals))
    small = [v if v is not None and v.size <= SMALL_VALUE else None for v in vals] + pad
    try:
        types = [None if v is None else TensorType(v.shape, _dt.from_numpy(v.dtype)) for v in vals] + pad
        return op.type_rel(attrs, types, small)
    except Exception:  # an invalid argument is the reference's to report, with its node
        return None


def _check_outputs(t: Type | None, what: str) -> None:
    if isinstance(t, TupleType):
        for f in t.fields:
            _check_outputs(f, what)
    elif isinstance(t, TensorType) and t.is_static:
        check_alloc(what, t.shape, t.dtype)


def _truth(v: Any) -> bool:
    return bool(np.asarray(v).reshape(-1)[0]) if np.asarray(v).size else False


def evaluate(mod: IRModule, feeds: dict[str, Any], interpreter: Interpreter | None = None) -> list[Any]:
    """Run `main` on named inputs; returns one value per output (a tuple result is flattened).
    `interpreter`: one that runs some calls its own way (kiln.runtime.generic_executor)."""
    main = mod.main
    names = [p.name for p in main.params]
    unknown = sorted(set(feeds) - set(names))
    if unknown:
        raise InputError(f"unknown input name(s) {', '.join(unknown)}; the model's inputs are "
                         f"{', '.join(names) or '(none)'}")
    missing = [n for n in names if n not in feeds]
    if missing:
        raise InputError(f"missing input(s) {', '.join(missing)}")
    dims: dict[str, int] = {}
    scope = Scope()
    for p in main.params:
        scope.values[id(p)] = check_input(p.name, feeds[p.name], p.type, dims)
    out = (interpreter or Interpreter(mod)).eval(main.body, scope)
    return list(out) if isinstance(main.body.type, TupleType) else [out]


def run_function(fn: Function, args: list[Any], mod: IRModule | None = None) -> Any:
    """Evaluate a Function on argument values (used by passes such as constant folding)."""
    return Closure(fn, Scope(), Interpreter(mod))(*args)

