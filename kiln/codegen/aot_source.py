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

    int32_t kiln_model_run_from(void** inputs, void** outputs, void* arena, void** weights,
                                int32_t start_step, int32_t* stopped_step)

runs the calls from `start_step` on (a step is one kernel call, numbered in call order from 0) and
is how a preempted run resumes. A kernel that returns non-zero stops it there: *stopped_step is that
step and the code is returned, KILN_PREEMPTED (kiln_pool.h) when a launch saw a cancel. The output
copies run only once every step finished. Built for Kiln's thread pool (`preemptible`), it calls
`kiln_run_enter_step(i)` before step i, so the pool numbers a step's launches and a resumed step
skips the chunks of its preempted launch that finished; a cancelled run stops there, before step i
(a checkpoint between kernels: a cancel during a serial kernel waits only for that kernel). Built
for OpenMP it is the same entry without those calls: OpenMP kernels have no checkpoints, so such a
run is never preempted once it has started (a cancel before it starts is the caller's to honour)
and it only ever runs to the end.
It is appended after the other two entries, which stay as they were.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from kiln.codegen.aot_abi import COPY_ENTRY, ENTRY, FAILED_CALL, PROFILE_ENTRY, RUN_FROM_ENTRY, STEP_ENTRY, STEPS_ENTRY
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
                 rules: CRules = C_RULES, header: Path = RUNTIME_HEADER, preemptible: bool = False) -> CSource:
    """The kernels of `funcs` and the entries that run `calls` in order, then `copies`;
    `preemptible`: the kernels launch into Kiln's pool, so the resumable entry marks its steps."""
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
    lines += _run_from_entry(invoke, copies, preemptible)
    return CSource(kernels.code + "\n" + "\n".join(lines), kernels.functions)


def _run_from_entry(invoke: Sequence[str], copies: Sequence[Copy], preemptible: bool) -> list[str]:
    """`kiln_model_run_from` (see the module doc): step i runs when start_step <= i; a non-zero code
    returns with the step it stopped in, before any output copy."""
    # declared here too: a module none of whose kernels launches does not include kiln_pool.h
    lines = ["int32_t kiln_run_enter_step(int32_t step);"] if preemptible else []
    lines += [f"int32_t {RUN_FROM_ENTRY}(void** inputs, void** outputs, void* arena, void** weights, "
             "int32_t start_step, int32_t* stopped_step) {",
             "  char* arena_ = (char*)arena;", "  int32_t rc = KILN_OK;",
             "  (void)inputs; (void)outputs; (void)arena_; (void)weights; (void)rc;"]
    for i, inv in enumerate(invoke):
        # the step boundary is a checkpoint: a cancelled run stops before the step
        call = f"(rc = kiln_run_enter_step({i})) != KILN_OK || (rc = {inv}) != KILN_OK" if preemptible \
            else f"(rc = {inv}) != KILN_OK"
        lines += [f"  if (start_step <= {i}) {{",
                  f"    if ({call}) {{ kiln_failed_call_ = {i}; *stopped_step = {i}; return rc; }}",
                  "  }"]
    for c in copies:
        lines.append(f"  memcpy({c.dst.c()}, {c.src.c()}, {c.nbytes});")
    return lines + [f"  *stopped_step = {len(invoke)};", "  return KILN_OK;", "}", ""]


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
