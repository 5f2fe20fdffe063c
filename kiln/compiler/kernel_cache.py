"""A second-level cache: each fused group's rendered C and calling convention, so a rebuild of an
unchanged model skips te/tir lowering and C printing (the compile cache then answers for gcc).

Key: the group's canonical text (kiln.tune.tasks.group_text) with the bytes of every constant, the
knob config its schedule runs under, the target (kiln.Target's key: machine and compiler) and a digest of Kiln's own
sources, so any change to the compiler invalidates every entry. Value: one JSON file (no pickle)
holding the function's C with placeholder symbols (kiln.codegen.c_source.RenderedFunc) and its
parameters (kiln.codegen.kernel_signature). A hit is a Kernel whose PrimFunc has the parameters and
the rendering but no loops. Groups whose kernels call the runtime library or read sizes that are
not parameters are never stored: the executor needs their loops. Files appear atomically.

NOTE: the digest reads the source files once per process. A schedule or compute replaced at run time
(a script that patches a module to compare two variants) does not change the key, so a second build in
the same process gets the first build's kernels and the comparison compares one kernel with itself.
Such an experiment gives each variant its own KILN_CACHE_DIR (a knob context, as
scripts/compare_knobs.py uses, bypasses the cache).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from kiln.codegen import runtime_lib
from kiln.codegen.c_rules import CRules, rules_for
from kiln.codegen.c_source import RENDERED_ATTR, RenderedFunc, render
from kiln.codegen.cache import atomic_write, default_cache_dir
from kiln.codegen.kernel_signature import decode_signature, encode_params
from kiln.codegen.lower_fused import Kernel, lower_primitive
from kiln.errors import ArtifactError
from kiln.ir.expr import Constant, Function
from kiln.ir.types import TupleType
from kiln.ir.visitor import post_order
from kiln.target import Target
from kiln.tir import expr as E
from kiln.tir.functor import walk
from kiln.tir.stmt import Evaluate, For, LetStmt, PrimFunc
from kiln.topi import knobs
from kiln.tune.apply import Tuned, lowering
from kiln.tune.tasks import group_text

FORMAT = 1
_KILN_ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def kiln_digest() -> str:
    """A digest of every source file of the kiln package: a changed compiler never reuses a kernel."""
    h = hashlib.sha256()
    for path in sorted(p for p in _KILN_ROOT.rglob("*") if p.suffix in (".py", ".h", ".c") and p.is_file()):
        data = path.read_bytes()
        h.update(f"{path.relative_to(_KILN_ROOT)}\0{len(data)}\0".encode() + data)
    return h.hexdigest()


def group_constants(fn: Function) -> list[np.ndarray]:
    """The constants lower_primitive passes as buffers, in its order (scalars become immediates)."""
    out, seen = [], set()
    for e in post_order(fn.body):
        if isinstance(e, Constant) and id(e) not in seen:
            seen.add(id(e))
            d = e.data
            if not (d.size == 1 and d.dtype.kind in "biuf" and d.dtype.itemsize <= 8):
                out.append(np.asarray(d, order="C"))
    return out


def kernel_key(fn: Function, config: dict[str, object] | None, target: str) -> str:
    h = hashlib.sha256()
    h.update(f"kiln-kernel {FORMAT}\n{kiln_digest()}\n{target}\n".encode())
    h.update(json.dumps(config, sort_keys=True, default=repr).encode() + b"\n")
    h.update(group_text(fn).encode())
    for e in post_order(fn.body):
        if isinstance(e, Constant):
            data = np.ascontiguousarray(e.data)
            h.update(f"\n{data.dtype.str}{data.shape}".encode() + data.tobytes())
    return h.hexdigest()


class KernelCache:
    """Fused groups lowered once per machine: `lower(fn, name, tuned)` is lower_primitive plus the
    rendering check, answered from disk when the same group was lowered before."""

    def __init__(self, root: Path | str | None = None):
        self.root = Path(root) if root is not None else default_cache_dir() / "kernels"
        self.hits = self.misses = 0

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def uncached(self, groups: list[tuple[int, Function]], tuned: Tuned | None = None,
                 target: Target | None = None) -> list[tuple[int, Function]]:
        """Those of `groups` ((index, group) pairs) that `lower` would have to lower: none have a key
        inside someone else's knob context, so none are listed there."""
        if knobs._ACTIVE.get() is not None:
            return []
        key = (target or Target.host()).key
        return [(n, fn) for n, fn in groups if not self.path(kernel_key(fn, _config(fn, tuned), key)).exists()]

    def lower(self, fn: Function, name: str, tuned: Tuned | None = None, target: Target | None = None) -> Kernel:
        target = target or Target.host()
        config = _config(fn, tuned)
        # NOTE: inside someone else's knob context (a tuner exploring) the key would miss its config
        outer = knobs._ACTIVE.get() is not None
        path = None if outer else self.path(kernel_key(fn, config, target.key))
        rules = rules_for(target)
        kernel = self._load(path, fn, name, rules) if path is not None else None
        if kernel is not None:
            self.hits += 1
            return kernel
        self.misses += 1
        with lowering(fn, tuned):
            k = lower_primitive(fn, name, target=target)
        rendered = render(k.func, rules)  # NOTE: raises for a group the C backend cannot spell
        func = dataclasses.replace(k.func, attrs=(*k.func.attrs, (RENDERED_ATTR, rendered)))
        kernel = dataclasses.replace(k, func=func)
        if path is None or _const_specs(group_constants(fn)) != _const_specs(k.constants):
            return kernel
        record = _record(k, rendered)
        if record is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, json.dumps(record).encode())
        return kernel

    def _load(self, path: Path, fn: Function, name: str, rules: CRules) -> Kernel | None:
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        consts = group_constants(fn)
        try:
            if record["format"] != FORMAT or record["constants"] != _const_specs(consts):
                return None
            decls = (tuple(map(tuple, record[k])) for k in ("vector_types", "externs"))
            stub = decode_signature(name, record["params"])
            rendered = RenderedFunc(record["code"], *decls, record["prototype"], stub.body, rules)
            attrs = (*(tuple(a) for a in record["attrs"]), (RENDERED_ATTR, rendered))
            func = PrimFunc(name, stub.params, stub.body, attrs)
            sig = func.params if record["signature"] is None else decode_signature(name, record["signature"]).params
        except (ArtifactError, KeyError, TypeError, ValueError, IndexError):
            return None
        out_types = list(fn.body.type.fields) if isinstance(fn.body.type, TupleType) else [fn.body.type]
        return Kernel(func, consts, len(fn.params), out_types, sig)


def _config(fn: Function, tuned: Tuned | None) -> dict[str, object] | None:
    """The knob config `fn` is lowered with: its tuning record's, if any."""
    return tuned.config_for(fn) if tuned is not None and tuned.configs else None


def _const_specs(consts: list[np.ndarray]) -> list[list[Any]]:
    return [[list(c.shape), c.dtype.str] for c in consts]


def _record(k: Kernel, rendered: RenderedFunc) -> dict[str, Any] | None:
    """The JSON record of a lowered kernel, or None when it must not be cached (see the module doc)."""
    f = k.func
    if _loops_need_the_executor(f):
        return None
    attrs = [[key, v] for key, v in f.attrs if key != RENDERED_ATTR]
    if not all(isinstance(v, (bool, int, float, str)) or v is None for _, v in attrs):
        return None
    try:
        params = encode_params(f)
        same = len(k.signature) == len(f.params) and all(a is b for a, b in zip(k.signature, f.params))
        signature = None if same else encode_params(dataclasses.replace(f, params=tuple(k.signature)))
    except ArtifactError:
        return None
    return {"format": FORMAT, "params": params, "signature": signature, "attrs": attrs,
            "constants": _const_specs(k.constants), "code": rendered.code,
            "vector_types": [list(x) for x in rendered.vector_types], "externs": [list(x) for x in rendered.externs],
            "prototype": rendered.prototype}


def _loops_need_the_executor(f: PrimFunc) -> bool:
    """Whether the loops call the runtime library or read a size that is no parameter (the executor
    then needs them: capacities, or the group runs on the host). One walk: it is on the cold path."""
    bound = {p for p in f.params if isinstance(p, E.Var)}
    used = set()
    for x in walk(f.body):
        if isinstance(x, Evaluate) and isinstance(x.value, E.Call) and x.value.name in runtime_lib.RUNTIME_FUNCS:
            return True
        if isinstance(x, For):
            bound.add(x.loop_var)
        elif isinstance(x, (LetStmt, E.Let)):
            bound.add(x.var)
        elif isinstance(x, E.Var):
            used.add(x)
    return bool(used - bound)
