"""One fuzz case: which seed model, mutation and executor a case number means, and running it in this
process with its outcome classified.

Outcomes: "ran", "clean" (a kiln.errors.KilnError), "traceback" (any other exception). "crash" and
"hang" are decided by the supervisor in runner.py, which sees the worker die or fall silent.
"""

from __future__ import annotations

import os
import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from tests.fuzz.mutations import MUTATIONS, mutate
from tests.fuzz.seeds import SEEDS

EXECUTORS = ("interpreter", "compiled")
SIZE_HINTS = ("too big", "maximum allowed size", "cannot allocate", "int too large", "overflow")


@dataclass(frozen=True)
class Case:
    """Case `index` of the run seeded `seed`, or a stored model file (a regression) when `file` is set."""

    index: int
    seed: int = 0
    file: str = ""
    executor: str = ""

    def plan(self) -> tuple[str, str, str]:
        """(seed model, mutation, executor): fixed by (seed, index); the executor alternates."""
        if self.file:
            return "file", os.path.basename(self.file), self.executor or EXECUTORS[self.index % 2]
        rng = np.random.default_rng([self.seed, self.index])
        model = sorted(SEEDS)[int(rng.integers(len(SEEDS)))]
        mutation = sorted(MUTATIONS)[int(rng.integers(len(MUTATIONS)))]
        return model, mutation, self.executor or EXECUTORS[self.index % 2]

    def model_bytes(self) -> bytes:
        if self.file:
            with open(self.file, "rb") as f:
                return f.read()
        model, mutation, _ = self.plan()
        return mutate(SEEDS[model](), mutation, np.random.default_rng([self.seed, self.index, 1]))


@dataclass
class Result:
    """What happened to one case; `size` marks a traceback from an allocation or shape size check
    that Kiln does not make yet (issue 33, deliverable 1)."""

    index: int
    model: str
    mutation: str
    executor: str
    outcome: str = ""
    error: str = ""
    where: str = ""
    size: bool = False
    compared: bool = False
    agree: bool | None = None
    secs: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def is_size_failure(exc: BaseException) -> bool:
    """A raw allocation failure or shape-arithmetic overflow: the size checks deliverable 1 adds."""
    if isinstance(exc, MemoryError | OverflowError):
        return True
    return isinstance(exc, ValueError) and any(h in str(exc).lower() for h in SIZE_HINTS)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, list) or isinstance(b, list):
        return isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and all(map(_same, a, b))
    if a is None or b is None:
        return a is None and b is None
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if a.dtype.kind in "fc" or b.dtype.kind in "fc":
        return bool(np.allclose(a, b, rtol=1e-3, atol=1e-4, equal_nan=True))
    return bool(np.array_equal(a, b))


def _symbolic_dims(mod) -> dict[str, int]:
    from kiln.ir.types import SizeVar, TensorType

    return {d.name: 2 for p in mod.main.params if isinstance(p.type, TensorType) and p.type.shape is not None
            for d in p.type.shape if isinstance(d, SizeVar)}


def execute(path: str, executor: str, result: Result) -> None:
    """Import `path`, feed random inputs as `kiln run` does, run it; compiled runs are checked against
    the interpreter."""
    import kiln
    from kiln.feeds import random_feeds

    mod = kiln.from_onnx(path)
    feeds = random_feeds(mod, {}, _symbolic_dims(mod), 0)
    if executor == "interpreter":
        kiln.evaluate(mod, feeds)
        return
    outs = kiln.build(mod).run(feeds)
    try:
        expected = kiln.evaluate(mod, feeds)
    except Exception as e:  # the compiled run is the case; the interpreter only checks it
        result.extra["interpreter_error"] = f"{type(e).__name__}: {e}"[:300]
        return
    result.compared = True
    result.agree = len(outs) == len(expected) and all(map(_same, outs, expected))


def run_case(case: Case, workdir: str) -> Result:
    """Write the case's model under `workdir`, run it and classify what happened."""
    from kiln.errors import KilnError

    model, mutation, executor = case.plan()
    result = Result(case.index, model, mutation, executor)
    start = time.perf_counter()
    try:
        path = os.path.join(workdir, "model.onnx")
        with open(path, "wb") as f:
            f.write(case.model_bytes())
        execute(path, executor, result)
        result.outcome = "ran"
    except KilnError as e:
        result.outcome, result.error = "clean", f"{type(e).__name__}: {e}"[:300]
    except Exception as e:
        result.outcome, result.error = "traceback", f"{type(e).__name__}: {e}"[:300]
        result.size = is_size_failure(e)
        frames = traceback.extract_tb(e.__traceback__)[-3:]
        result.where = " <- ".join(f"{os.path.relpath(f.filename)}:{f.lineno}" for f in reversed(frames))
    result.secs = round(time.perf_counter() - start, 3)
    return result
