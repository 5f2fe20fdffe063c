"""`CompiledModel`: what kiln.build returns, the optimized model with the executor that runs it
(kiln.runtime.model.Model) plus what the build knows: its report and the tuned configs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kiln.compiler.lower import lower_groups
from kiln.compiler.report import BuildReport
from kiln.runtime import artifact
from kiln.runtime.executor import GraphExecutor
from kiln.runtime.model import Model, TensorInfo  # noqa: F401  (TensorInfo re-exported)

if TYPE_CHECKING:
    from kiln.tune.apply import Tuned


@dataclass
class CompiledModel(Model):
    """A built model: `run(feeds)` on its executor (or the per-shape AOT builds), `export` to a directory."""

    report: BuildReport = field(default_factory=BuildReport)
    tuned: Tuned | None = None  # the tuning records' configs the kernels were scheduled with

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.weights_bytes is None:  # the report counted them at import
            self.weights_bytes = self.report.weights_bytes

    def _saved_notes(self) -> dict[str, Any]:
        """The build profile, for `kiln show DIR`."""
        return {"build_profile": self.report.profile.to_json()}

    def _graph_state(self) -> GraphExecutor:
        """An AOT build's kernel-by-kernel view, lowered again (the kernel cache makes that cheap)."""
        if isinstance(self.runner, GraphExecutor):
            return self.runner
        _, kernel_of, host = lower_groups(self.mod, self.tuned, target=self.target)
        lib = self.runner.library
        return artifact.assemble(self.mod, kernel_of, host, lambda k: lib.get_function(k.func.name), lib)
