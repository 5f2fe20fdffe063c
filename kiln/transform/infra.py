"""Pass infrastructure: named module/function passes, Sequential, PassContext and instruments.

A pass maps IRModule -> IRModule and keeps meaning. Passes are declared as plain functions with
`@module_pass("name", opt_level=N)` or `@function_pass(...)`; the name is the command-line name.
`PassContext` (a context manager) decides which passes run: a pass runs when its opt_level is at
most the context's, or it is listed in `required`, and it is not listed in `disabled`. A pass
declares the `PassContext.config` keys it reads (`config=`), so that a context naming an unknown
pass or config key fails when it is made instead of silently doing nothing.
"""

from __future__ import annotations

import contextlib
import difflib
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from kiln.errors import KilnError
from kiln.ir.expr import Function
from kiln.ir.module import IRModule
from kiln.target import Target


@dataclass(frozen=True)
class PassInfo:
    name: str
    opt_level: int = 0
    required: tuple[str, ...] = ()  # passes that must run before this one
    config: tuple[str, ...] = ()  # the PassContext.config keys the pass reads


class Pass:
    info: PassInfo

    @property
    def name(self) -> str:
        return self.info.name

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:  # pragma: no cover
        raise NotImplementedError

    def __call__(self, mod: IRModule, ctx: PassContext | None = None) -> IRModule:
        ctx = ctx or PassContext.current()
        if not ctx.should_run(self):
            return mod
        for inst in ctx.instruments:
            inst.before(self, mod)
        out = self.transform(mod, ctx)
        for inst in reversed(ctx.instruments):
            inst.after(self, out)
        return out

    def __repr__(self) -> str:
        return f"<pass {self.name}>"


@dataclass(frozen=True, eq=False)
class ModulePass(Pass):
    info: PassInfo
    fn: Callable[[IRModule, PassContext], IRModule]

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        return self.fn(mod, ctx)


@dataclass(frozen=True, eq=False)
class FunctionPass(Pass):
    """Applies `fn` to every function of the module; Primitive (fused) functions are left alone."""

    info: PassInfo
    fn: Callable[[Function, IRModule, PassContext], Function]

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        out = mod
        for name, f in mod.functions.items():
            if f.attr("Primitive"):
                continue
            g = self.fn(f, out, ctx)
            if g is not f:
                out = out.with_function(name, g)
        return out


@dataclass(frozen=True, eq=False)
class Sequential(Pass):
    passes: tuple[Pass, ...]
    info: PassInfo = PassInfo("sequential")

    def __call__(self, mod: IRModule, ctx: PassContext | None = None) -> IRModule:
        ctx = ctx or PassContext.current()
        for p in self.passes:
            mod = p(mod, ctx)
        return mod

    def transform(self, mod: IRModule, ctx: PassContext) -> IRModule:
        return self(mod, ctx)


PASSES: dict[str, Pass] = {}


def _register(p: Pass) -> Pass:
    if p.name in PASSES:
        raise ValueError(f"pass {p.name} defined twice")
    PASSES[p.name] = p
    return p


def module_pass(name: str, opt_level: int = 0, config: Sequence[str] = ()) -> Callable[[Callable], ModulePass]:
    def deco(fn: Callable[[IRModule, PassContext], IRModule]) -> ModulePass:
        p = ModulePass(PassInfo(name, opt_level, config=tuple(config)), fn)
        _register(p)
        return p

    return deco


def function_pass(name: str, opt_level: int = 0, config: Sequence[str] = ()) -> Callable[[Callable], FunctionPass]:
    def deco(fn: Callable[[Function, IRModule, PassContext], Function]) -> FunctionPass:
        p = FunctionPass(PassInfo(name, opt_level, config=tuple(config)), fn)
        _register(p)
        return p

    return deco


class Instrument:
    """Hooks around every pass that runs."""

    def before(self, p: Pass, mod: IRModule) -> None:
        pass

    def after(self, p: Pass, mod: IRModule) -> None:
        pass


@dataclass
class PassTiming(Instrument):
    """Wall time per pass; `table()` renders it."""

    times: list[tuple[str, float]] = field(default_factory=list)
    _t0: list[float] = field(default_factory=list)

    def before(self, p: Pass, mod: IRModule) -> None:
        self._t0.append(time.perf_counter())

    def after(self, p: Pass, mod: IRModule) -> None:
        self.times.append((p.name, time.perf_counter() - self._t0.pop()))

    def table(self) -> str:
        total = sum(t for _, t in self.times) or 1e-12
        rows = [f"{'pass':32s} {'ms':>10s} {'%':>6s}"]
        rows += [f"{n:32s} {t * 1e3:10.2f} {100 * t / total:6.1f}" for n, t in self.times]
        rows.append(f"{'total':32s} {total * 1e3:10.2f}")
        return "\n".join(rows)


@dataclass
class PrintIR(Instrument):
    """Dump the IR before and/or after the named passes (all passes when `passes` is empty)."""

    passes: tuple[str, ...] = ()
    before_pass: bool = False
    after_pass: bool = True
    out: Callable[[str], None] = print

    def _want(self, p: Pass) -> bool:
        return not isinstance(p, Sequential) and (not self.passes or p.name in self.passes)

    def before(self, p: Pass, mod: IRModule) -> None:
        if self.before_pass and self._want(p):
            from kiln.ir.printer import text

            self.out(f"// IR before {p.name}\n{text(mod)}")

    def after(self, p: Pass, mod: IRModule) -> None:
        if self.after_pass and self._want(p):
            from kiln.ir.printer import text

            self.out(f"// IR after {p.name}\n{text(mod)}")


class WellFormedCheck(Instrument):
    """Check the IR after every pass; the error names the pass that broke it."""

    def after(self, p: Pass, mod: IRModule) -> None:
        from kiln.errors import WellFormednessError
        from kiln.ir.wellformed import check_well_formed

        try:
            check_well_formed(mod)
        except WellFormednessError as e:
            raise WellFormednessError(f"pass '{p.name}' produced ill-formed IR: {e}") from None


@dataclass
class PassContext:
    opt_level: int = 2
    required: Sequence[str] = ()
    disabled: Sequence[str] = ()
    instruments: Sequence[Instrument] = ()
    config: dict[str, Any] = field(default_factory=dict)
    target: Target = field(default_factory=Target.host)  # the machine passes optimize for

    _stack = []  # the contexts entered, innermost last

    def __post_init__(self) -> None:
        for what, names in (("required", self.required), ("disabled", self.disabled)):
            _check_known(names, PASSES, f"{what} pass {{!r}} is not a pass")
        _check_known(self.config, config_keys(), "pass config key {!r} is read by no pass")

    def should_run(self, p: Pass) -> bool:
        if isinstance(p, Sequential):
            return True
        if p.name in self.disabled:
            return False
        return p.info.opt_level <= self.opt_level or p.name in self.required

    @classmethod
    def current(cls) -> PassContext:
        return cls._stack[-1] if cls._stack else cls()

    def __enter__(self) -> PassContext:
        PassContext._stack.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        PassContext._stack.pop()


def config_keys() -> set[str]:
    """Every PassContext.config key some registered pass reads."""
    return {key for p in PASSES.values() for key in p.info.config}


def _check_known(names: Iterable[str], known: Collection[str], message: str) -> None:
    """KilnError (`message` formatted with the name) for the first name not in `known`, suggesting
    the closest known ones: a misspelt name would otherwise be silently ignored."""
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=3)
            hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
            raise KilnError(message.format(name) + hint)


@contextlib.contextmanager
def pass_context(**kw: Any) -> Iterator[PassContext]:
    with PassContext(**kw) as ctx:
        yield ctx
