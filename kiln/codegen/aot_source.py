"""The AOT entry: a whole model as one C function that calls its kernels in a planned order.

    int32_t kiln_model_run(void** inputs, void** outputs, void* arena, void** weights)

Every tensor argument is a pointer chosen at compile time: a model input, a weight, a model output
or an offset into the arena. The entry calls each kernel's typed body (static, in the same
translation unit), stops at the first non-zero return code and returns it, then copies the model
outputs that no kernel writes (an input, a weight, a tensor returned twice). Only indices and
numbers reach this source: no name from the model file.

    int32_t kiln_model_profile(void** inputs, void** outputs, void* arena, void** weights, double* seconds)

is the same run that also adds each call's wall time to seconds[i] (i in call order), so a profile
times the kernels exactly as the entry runs them: in the planned arena, without Python between calls.
When a kernel fails, `kiln_model_failed_call()` says which call (per thread), for the error message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from kiln.codegen.aot_abi import COPY_ENTRY, ENTRY, FAILED_CALL, PROFILE_ENTRY, STEP_ENTRY, STEPS_ENTRY
from kiln.codegen.c_rules import C_RULES, CRules
from kiln.codegen.c_source import RUNTIME_HEADER, CSource, generate
from kiln.codegen.c_types import CodegenError
from kiln.tir.expr import elem_of
from kiln.tir.stmt import Buffer, PrimFunc


@dataclass(frozen=True)
class Ptr:
    """Where a tensor lives: inputs[index], weights[index], outputs[index] or arena + index bytes."""

    kind: Literal["input", "weight", "output", "arena"]
    index: int

    def c(self) -> str:
        if self.kind == "arena":
            return f"(arena_ + {self.index})"
        return f"{self.kind}s[{self.index}]"


@dataclass(frozen=True)
class KernelCall:
    func: str  # PrimFunc name
    args: tuple[Ptr, ...]  # one per PrimFunc parameter, all buffers (static shapes)


@dataclass(frozen=True)
class Copy:
    dst: Ptr
    src: Ptr
    nbytes: int


def generate_aot(funcs: Sequence[PrimFunc], calls: Sequence[KernelCall], copies: Sequence[Copy],
                 rules: CRules = C_RULES, header: Path = RUNTIME_HEADER) -> CSource:
    """The kernels of `funcs` and the entry that runs `calls` in order, then `copies`."""
    kernels = generate(funcs, rules, header)
    invoke = []
    for call in calls:
        info = kernels.functions.get(call.func)
        if info is None:
            raise CodegenError(f"AOT entry calls {call.func!r}, which is not among the module's functions")
        params = info.func.params
        if len(params) != len(call.args):
            raise CodegenError(f"AOT entry passes {len(call.args)} arguments to {call.func!r}, "
                               f"which takes {len(params)}")
        args = ", ".join(_arg(p, a, call.func, rules) for p, a in zip(params, call.args))
        invoke.append(f"{info.body_symbol}({args})")
    lines = ["#include <time.h>",
             "static double kiln_now_(void) {",
             "  struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return (double)t.tv_sec + 1e-9 * t.tv_nsec;",
             "}",
             "static __thread int32_t kiln_failed_call_ = -1;",
             f"int32_t {FAILED_CALL}(void) {{ return kiln_failed_call_; }}"]
    for profiled in (False, True):
        head = f"int32_t {PROFILE_ENTRY}(void** inputs, void** outputs, void* arena, void** weights, " \
               "double* seconds) {" if profiled else \
               f"int32_t {ENTRY}(void** inputs, void** outputs, void* arena, void** weights) {{"
        lines += [head, "  char* arena_ = (char*)arena;", "  int32_t rc = KILN_OK;",
                  "  (void)inputs; (void)outputs; (void)arena_; (void)weights; (void)rc;"]
        for i, inv in enumerate(invoke):
            if profiled:
                lines.append(f"  {{ double t0 = kiln_now_(); rc = {inv}; seconds[{i}] += kiln_now_() - t0; }}")
            else:
                lines.append(f"  rc = {inv};")
            lines.append(f"  if (rc != KILN_OK) {{ kiln_failed_call_ = {i}; return rc; }}")
        for c in copies:
            lines.append(f"  memcpy({c.dst.c()}, {c.src.c()}, {c.nbytes});")
        lines += ["  return KILN_OK;", "}", ""]
    return CSource(kernels.code + "\n" + "\n".join(lines), kernels.functions)


def _arg(p, ptr: Ptr, fname: str, rules: CRules) -> str:
    if not isinstance(p, Buffer):
        raise CodegenError(f"{fname}: parameter {p.name!r} is a scalar; the AOT entry passes only "
                           "buffers (static shapes)")
    return f"({rules.storage_ctype[elem_of(p.dtype)]}*){ptr.c()}"


def generate_dataflow(funcs: Sequence[PrimFunc], calls: Sequence[KernelCall], copies: Sequence[Copy],
                      rules: CRules = C_RULES, header: Path = RUNTIME_HEADER) -> CSource:
    """`generate_aot`'s module with entries for the dataflow executor appended, so any call can run
    by its index in `calls`, from any thread, without Python between the calls of one chain:

        int32_t kiln_model_step(int32_t step, void** inputs, void** outputs, void* arena, void** weights)
        int32_t kiln_model_steps(const int32_t* steps, int32_t n, void** inputs, void** outputs,
                                 void* arena, void** weights)
        void kiln_model_copy_outputs(void** inputs, void** outputs, void* arena, void** weights)

    kiln_model_steps runs steps[0..n) in order, stops at the first failure and leaves its index in
    `kiln_model_failed_call()` of the calling thread; kiln_model_copy_outputs makes the entry's
    closing copies, once every call is done."""
    base = generate_aot(funcs, calls, copies, rules, header)
    lines = [f"int32_t {STEP_ENTRY}(int32_t step, void** inputs, void** outputs, void* arena, void** weights) {{",
             "  char* arena_ = (char*)arena;",
             "  (void)inputs; (void)outputs; (void)arena_; (void)weights;",
             "  switch (step) {"]
    for i, call in enumerate(calls):
        info = base.functions[call.func]
        args = ", ".join(_arg(p, a, call.func, rules) for p, a in zip(info.func.params, call.args))
        lines.append(f"    case {i}: return {info.body_symbol}({args});")
    lines += ["    default: return KILN_ERR_NUM_ARGS;", "  }", "}",
              f"int32_t {STEPS_ENTRY}(const int32_t* steps, int32_t n, void** inputs, void** outputs, void* arena, "
              "void** weights) {",
              "  for (int32_t k = 0; k < n; ++k) {",
              f"    int32_t rc = {STEP_ENTRY}(steps[k], inputs, outputs, arena, weights);",
              "    if (rc != KILN_OK) { kiln_failed_call_ = steps[k]; return rc; }",
              "  }",
              "  return KILN_OK;",
              "}",
              f"void {COPY_ENTRY}(void** inputs, void** outputs, void* arena, void** weights) {{",
              "  char* arena_ = (char*)arena;",
              "  (void)inputs; (void)outputs; (void)arena_; (void)weights;"]
    lines += [f"  memcpy({c.dst.c()}, {c.src.c()}, {c.nbytes});" for c in copies]
    lines += ["}", ""]
    return CSource(base.code + "\n".join(lines), base.functions)
