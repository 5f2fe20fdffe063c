"""Tiered execution: a session runs on the generic kernels at once and on its own kernels once they compile.

`Tiers` holds the tier runs go to (`current`): the generic executor first (kiln.runtime.generic_executor),
the specialized Model once a background thread has built it. The swap is one assignment of an
immutable reference, and a run reads it once: every run is entirely on one tier, and a run in flight
during the swap finishes where it started. A build that fails leaves the session on the generic tier,
with the error in `status` and raised by `wait`. The build itself is handed in (the runtime imports no
compiler); it reports kernels compiled through the callback it is given.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kiln.runtime.model import Model, interface
from kiln.runtime.process_memory import return_freed_memory

if TYPE_CHECKING:
    from kiln.runtime.generic_executor import GenericExecutor

GENERIC, SPECIALIZED, FAILED = "generic", "specialized", "failed"

KernelProgress = Callable[[int, int], None]  # (kernels compiled, kernels in all)


@dataclass(frozen=True)
class TierStatus:
    """Where a session stands: the tier its runs go to now ("generic", "specialized", or "failed": the
    build failed and runs stay generic) and the specialized build's kernels compiled of those it has
    (total None until lowering has counted them)."""

    tier: str
    kernels_compiled: int
    kernels_total: int | None
    error: str | None = None

    def __str__(self) -> str:
        if self.tier == SPECIALIZED and self.kernels_total is None:
            return f"tier {SPECIALIZED} (compiled before this session)"
        total = "?" if self.kernels_total is None else self.kernels_total
        text = f"tier {self.tier}, {self.kernels_compiled}/{total} kernels compiled"
        return text + (f" ({self.error})" if self.error else "")


class Tiers:
    def __init__(self, generic: GenericExecutor, build: Callable[[KernelProgress], Model],
                 on_status: Callable[[TierStatus], None] | None = None):
        """Starts `build(progress)` on a daemon thread (a process exiting does not wait for it)."""
        self.generic: GenericExecutor | None = generic  # None once the specialized model runs (see _specialize)
        self.target = generic.target
        self.inputs, self.outputs = interface(generic.mod)
        self.current: GenericExecutor | Model = generic  # NOTE: assigned once, by the build thread
        self._build = build
        self._on_status = on_status
        self._compiled, self._total = 0, None
        self._error: BaseException | None = None
        self._done = threading.Event()
        threading.Thread(target=self._specialize, name="kiln-specialize", daemon=True).start()

    def _specialize(self) -> None:
        try:
            model = self._build(self._progress)
        except BaseException as e:  # noqa: BLE001  (kept for status and wait; the generic tier keeps serving)
            self._error = e
        else:
            self.current = model
            # NOTE: the generic tier's imported weights are a second copy beside the model's packed ones; a run
            # still on that tier holds its own reference until it ends
            self.generic = None
            return_freed_memory()
        finally:
            try:
                self._notify()  # before waiters wake: a wait() that returns has seen the last status
            finally:
                self._done.set()

    def _progress(self, compiled: int, total: int) -> None:
        self._compiled, self._total = compiled, total
        self._notify()

    def _notify(self) -> None:
        if self._on_status is not None:
            self._on_status(self.status)

    @property
    def status(self) -> TierStatus:
        if self._error is not None:
            return TierStatus(FAILED, self._compiled, self._total, f"{type(self._error).__name__}: {self._error}")
        tier = SPECIALIZED if isinstance(self.current, Model) else GENERIC
        return TierStatus(tier, self._compiled, self._total)

    def wait(self, timeout: float | None = None) -> Model:
        """The specialized model, once built (its build's error re-raised; TimeoutError after `timeout` s)."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"the specialized build did not finish in {timeout} s ({self.status})")
        if self._error is not None:
            raise self._error
        assert isinstance(self.current, Model)
        return self.current

    def run(self, feeds: dict[str, Any], run_model: Callable[[Model, dict[str, Any]], list],
            run_generic: Callable[[GenericExecutor, dict[str, Any]], list]) -> list:
        """One run, all on the tier current when it starts."""
        tier = self.current
        return run_model(tier, feeds) if isinstance(tier, Model) else run_generic(tier, feeds)
