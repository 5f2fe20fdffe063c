"""The generic tier: a model run op by op on Kiln's shape-generic kernels, with no model-specific compile.

A session answers its first runs here while the model's own kernels compile (kiln.runtime.tiers). The
graph is the imported one (no passes: they would cost the seconds this tier exists to save); the
reference interpreter walks it, and each call of an operator the generic kernels cover
(kiln.runtime.generic_ops) runs there, others on the operator's numpy reference. Never ONNX Runtime.
A conv / Gemm / MatMul with the batch norm, adds and clamp after it (kiln.runtime.generic_fusion) is one
kernel call: the interpreter sees the chain's last call read the chain's inputs. A flat graph runs its
steps in the order found once (kiln.runtime.generic_plan) instead of the interpreter's walk.
Runs may overlap: each has its own interpreter scope, and the shared cache holds only values derived
from constants.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

from kiln.codegen import generic_library
from kiln.ir.expr import Call, Expr, Op, TupleGetItem, children
from kiln.ir.module import IRModule
from kiln.ir.visitor import post_order
from kiln.op.interpreter import Interpreter, Scope, evaluate, run_op
from kiln.runtime.generic_fusion import Chain, find_chains, run_fused
from kiln.runtime.generic_ops import GENERIC_OPS
from kiln.runtime.generic_plan import Plan, make_plan
from kiln.target import Target


def _whole_uses(root: Expr) -> set[int]:
    """Ids of the calls some node reads other than through their first tuple field: a max pool among
    them must compute its Indices, which the generic kernel does not."""
    whole: set[int] = set()
    for e in post_order(root):
        if isinstance(e, TupleGetItem):
            if e.index != 0:
                whole.add(id(e.tuple_value))
            continue
        whole.update(id(c) for c in children(e))
    whole.add(id(root))
    return whole


class _GenericInterpreter(Interpreter):
    """The reference interpreter, with covered calls sent to the generic kernels and each chain's last call
    computing the whole chain."""

    def __init__(self, executor: GenericExecutor):
        super().__init__(executor.mod)
        self.executor = executor

    def eval(self, root: Expr, scope: Scope) -> Any:
        if self.executor.plan is None or root is not self.mod.main.body:
            return super().eval(root, scope)
        return self.executor.run_plan(scope.values)

    def _pending(self, e: Expr, scope: Scope) -> Expr | None:
        chain = self.executor.chains.get(id(e))
        if chain is None:
            return super()._pending(e, scope)
        return next((d for d in chain.inputs if not scope.lookup(d)[0]), None)

    def _compute(self, e: Expr, scope: Scope) -> Any:
        chain = self.executor.chains.get(id(e))
        if chain is not None:
            return self.executor.run_chain(chain, lambda a: scope.lookup(a)[1])
        if isinstance(e, Call) and isinstance(e.op, Op):
            value = self.executor.try_kernel(e, [scope.lookup(a)[1] for a in e.args])
            if value is not None:
                return value
        return super()._compute(e, scope)


class GenericExecutor:
    """Runs an imported IRModule on the generic kernels of `target` (built into the compile cache on
    first use, per machine and target)."""

    def __init__(self, mod: IRModule, target: Target):
        self.mod = mod
        self.target = target
        self.library: ctypes.CDLL = generic_library.load(target)
        self._whole = _whole_uses(mod.main.body)
        self.chains: dict[int, Chain] = find_chains(mod.main.body)
        self.plan: Plan | None = make_plan(mod.main.body, self.chains)
        self._derived: dict = {}  # (call id, argument) -> a constant argument re-laid out once
        self.kernel_calls = 0  # calls the generic kernels ran, for tests and status

    def try_kernel(self, call: Call, args: list[Any]) -> Any:
        """The call's value from the generic kernels, or None where they do not cover it."""
        handler = GENERIC_OPS.get(call.op.name)
        if handler is None or (call.op.name == "nn.max_pool" and id(call) in self._whole):
            return None
        value = handler(self.library, call, args, self._derived)
        if value is not None:
            self.kernel_calls += 1
        return value

    def run_chain(self, chain: Chain, values: Callable[[Expr], Any]) -> Any:
        """The chain's last value: one kernel call where its values fit, else call by call."""
        value = run_fused(self.library, chain, values, self._derived)
        if value is not None:
            self.kernel_calls += 1
            return value
        prev: Expr | None = None
        for call in chain.calls:
            args = [value if a is prev else values(a) for a in call.args]
            value = self.try_kernel(call, args)
            if value is None:
                value = run_op(call.op, call.attrs, args, call.name, call.type)
            prev = call
        return value

    def run_plan(self, values: dict[int, Any]) -> Any:
        """`main`'s value by the plan, `values` holding the checked inputs by parameter id."""
        values.update(self.plan.constants)
        for e, dead in zip(self.plan.steps, self.plan.dead):
            values[id(e)] = self._step(e, values)
            for key in dead:
                del values[key]
        return values[id(self.mod.main.body)]

    def _step(self, e: Expr, values: dict[int, Any]) -> Any:
        if id(e) in self.chains:
            return self.run_chain(self.chains[id(e)], lambda a: values[id(a)])
        if isinstance(e, Call):
            args = [values[id(a)] for a in e.args]
            value = self.try_kernel(e, args)
            return run_op(e.op, e.attrs, args, e.name, e.type) if value is None else value
        if isinstance(e, TupleGetItem):
            return values[id(e.tuple_value)][e.index]
        return tuple(values[id(f)] for f in e.fields)

    def run(self, feeds: dict[str, Any]) -> list[Any]:
        """The outputs of `main` on named inputs (checked as the interpreter checks them)."""
        return evaluate(self.mod, feeds, _GenericInterpreter(self))
