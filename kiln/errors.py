"""Errors a user can cause. Each message names what was wrong (file, node, input) and what was expected."""

from __future__ import annotations


class KilnError(Exception):
    """Base of every error Kiln raises on purpose; the CLI prints these without a traceback."""


class ModelLoadError(KilnError):
    """The model file is missing, unreadable, truncated or rejected by the ONNX checker."""


class UnsupportedOpError(KilnError):
    """The model uses operators Kiln does not implement; lists all of them at once."""

    def __init__(self, unsupported: list[tuple[str, str, int, str]]):
        self.unsupported = unsupported
        lines = [f"  {op} (domain '{dom or 'ai.onnx'}', opset {ver}) at node '{name}'"
                 for op, dom, ver, name in unsupported]
        super().__init__(f"{len(unsupported)} unsupported operator node(s):\n" + "\n".join(lines))


class ImportError_(KilnError):
    """A node could not be converted (bad attribute, inconsistent inputs)."""


class TypeInferenceError(KilnError):
    """An operator's inputs do not satisfy its type relation (shapes, dtypes, attributes)."""


class InputError(KilnError):
    """A run-time input is missing, unknown, or has the wrong shape or dtype."""


class CalibrationError(InputError):
    """Calibration data for `kiln quantize` is missing or does not fit the model (names the file and input)."""


class QuantizeError(KilnError):
    """A model cannot be quantized as asked (an option out of range, an opset that cannot be raised)."""


class ParseError(KilnError):
    """The IR text could not be parsed; names line and column."""


class WellFormednessError(KilnError):
    """The IR breaks an invariant: unbound variable, type mismatch, ..."""


class EvaluationError(KilnError):
    """An operator failed at run time (names the op and the node)."""


class CodegenError(KilnError):
    """A tir program the C backend cannot spell (unknown node or intrinsic, bad vector width, ...)."""


class CompileError(KilnError):
    """The C compiler rejected generated code; the source stays on disk at the path named."""


class CompilerNotFoundError(CompileError):
    """No C compiler where Kiln looked for one."""


class KernelError(KilnError):
    """A compiled kernel returned an error code (a temporary could not be allocated, ...)."""


class ArtifactError(KilnError):
    """A compiled-model directory is missing, corrupt, from another Kiln, or not for this CPU."""


class AotError(KilnError):
    """The model cannot be compiled ahead of time; the graph executor (executor="graph") runs it instead."""


class MemoryLimitError(KilnError):
    """A tensor (or the planned arena) is larger than the memory limit, or than the memory the machine
    has available; raised before the memory is touched (kiln.ir.sizes). Names the node or input, its
    shape, dtype and bytes."""


class ShapeError(KilnError):
    """A tensor to allocate has a negative dim (from a model's shape values or an input's dims)."""


class ComputeError(KilnError):
    """A call cannot become a te compute (a shape-deciding input is not a constant, an unsupported
    attribute combination); names the operator and what was missing."""


class LoweringError(KilnError):
    """A fused group cannot become a kernel (an operator without a compute, a dynamic attribute)."""


class RunStateError(KilnError):
    """A run in flight was used out of turn: run while it runs, or after it finished, failed or was closed."""


class ServeError(KilnError):
    """A request the server cannot take: its status code says why (400 malformed, 404 unknown model,
    503 queue full, 504 timed out)."""

    status = 400


class RepositoryError(ServeError):
    """A model repository entry Kiln cannot serve: a bad name, a missing model file, a bad config file."""


class BodyTooLargeError(ServeError):
    status = 413


class ModelNotReadyError(ServeError):
    """The model is known but cannot answer yet (still loading)."""

    status = 503


class UnknownModelError(ServeError):
    status = 404


class QueueFullError(ServeError):
    status = 503


class RequestTimeoutError(ServeError):
    status = 504


class ServerClosedError(ServeError):
    """The dispatcher was closed: it takes no more requests, and without draining fails the queued ones."""

    status = 503


class DistributedError(KilnError):
    """A distributed run (kiln.distributed on Ray) failed: Ray missing, a cluster unreachable, a stage or replica
    that could not be built, loaded or kept alive."""
