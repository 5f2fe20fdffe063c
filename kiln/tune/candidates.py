"""Knob configs of one task -> compiled standalone kernels the measuring process can run.

A batch of candidates is lowered separately and compiled as one C module (one gcc run instead of
one per candidate). If gcc rejects the batch, each candidate is compiled alone so that only the bad
ones fail. Constants (weights) are written once as .npy files the child loads: timing runs on the
real weights, and inputs are random.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kiln.codegen.c_rules import rules_for
from kiln.codegen.c_source import generate
from kiln.codegen.cache import CompileCache
from kiln.codegen.lower_fused import Kernel
from kiln.errors import KilnError
from kiln.ir.dtype import to_numpy
from kiln.target import Target
from kiln.tir.expr import IntImm
from kiln.tir.stmt import Buffer, PrimFunc
from kiln.tune.measure import KernelSpec
from kiln.tune.tasks import Task, lower_with


@dataclass
class Built:
    """A candidate after lowering and compiling: a spec to measure, or why there is none."""

    spec: KernelSpec | None
    func: PrimFunc | None  # the lowered kernel
    error: str | None = None


def lower_candidates(task: Task, configs: Sequence[Mapping[str, object]]) -> list[Kernel | str]:
    out: list[Kernel | str] = []
    for n, cfg in enumerate(configs):
        try:
            out.append(lower_with(task.fn, f"cand{n}", cfg))
        except Exception as err:  # a knob combination the schedule cannot do is a failed candidate
            out.append(f"lower: {type(err).__name__}: {err}")
    return out


def build_candidates(task: Task, configs: Sequence[Mapping[str, object]], workdir: Path,
                     cache: CompileCache | None = None) -> list[Built]:
    cache = cache or CompileCache()
    kernels = lower_candidates(task, configs)
    ok = [k for k in kernels if isinstance(k, Kernel)]
    libs: dict[int, tuple[str, str] | Exception] = {}
    if ok:
        try:
            source = generate([k.func for k in ok], rules_for(Target.host()))
            lib = str(cache.build(source.code))
            libs = {id(k): (lib, source.functions[k.func.name].symbol) for k in ok}
        except Exception:
            libs = {id(k): _compile_one(k, cache) for k in ok}
    built = []
    for k in kernels:
        if isinstance(k, str):
            built.append(Built(None, None, k))
        elif isinstance(libs[id(k)], Exception):
            err = libs[id(k)]
            built.append(Built(None, k.func, f"compile: {type(err).__name__}: {str(err)[:300]}"))
        else:
            lib, symbol = libs[id(k)]
            built.append(Built(KernelSpec(lib, symbol, kernel_args(k, workdir)), k.func))
    return built


def _compile_one(k: Kernel, cache: CompileCache) -> tuple[str, str] | Exception:
    try:
        source = generate([k.func], rules_for(Target.host()))  # the host's threading, as builds use
        return str(cache.build(source.code)), source.functions[k.func.name].symbol
    except Exception as err:  # gcc's complaint or a codegen gap: this candidate's failure
        return err


def kernel_args(k: Kernel, workdir: Path) -> tuple[dict, ...]:
    """The argument specs of a static-shaped kernel, in its parameter order."""
    args = []
    n_const = len(k.constants)
    for i, p in enumerate(k.signature):
        if not isinstance(p, Buffer):
            raise KilnError(f"{k.func.name}: parameter {p} is a symbolic size; only static kernels are tuned")
        shape = [d.value if isinstance(d, IntImm) else None for d in p.shape]
        if None in shape:
            raise KilnError(f"{k.func.name}: buffer {p.name} has a symbolic shape")
        spec = {"dtype": np.dtype(to_numpy(p.dtype)).str, "shape": shape}
        if i < k.num_params:
            spec["role"] = "input"
        elif i < k.num_params + n_const:
            spec.update(role="const", file=str(_const_file(k.constants[i - k.num_params], workdir)))
        else:
            spec["role"] = "output"
        args.append(spec)
    return tuple(args)


def _const_file(a: np.ndarray, workdir: Path) -> Path:
    a = np.ascontiguousarray(a) if a.ndim else a
    path = workdir / f"const_{hashlib.sha256(a.tobytes() + str((a.dtype, a.shape)).encode()).hexdigest()[:20]}.npy"
    if not path.exists():
        workdir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{id(a)}")
        with open(tmp, "wb") as f:
            np.save(f, a, allow_pickle=False)
        tmp.replace(path)
    return path
