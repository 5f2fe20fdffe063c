"""`Pipeline`: a model cut into K stages, each compiled here and run by a Ray actor of one placement group.

The driver is the single controller (Pathways): it plans the cuts (kiln.distributed.stage_plan),
compiles every stage, ships each as a bundle through the object store, reserves the stages' CPUs as
one gang and submits each request as a chain of actor calls (pipeline_requests) or into a compiled
graph (pipeline_compiled). `run` / `run_async` answer like an InferenceSession's.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np

from kiln.distributed.bundle import pack
from kiln.distributed.pipeline_placement import reserve, start_stage
from kiln.distributed.ray_env import connect
from kiln.distributed.stage_cost import CostModel
from kiln.distributed.stage_plan import compile_stages, plan_pipeline
from kiln.errors import DistributedError, KilnError

MAX_INFLIGHT = 16  # executions a compiled graph keeps submitted at once


class Pipeline:
    """`model` (an ONNX model / path / bytes or an IRModule) as `stages` stages on Ray actors.

    address: the Ray cluster (None: this process's connection, or a new local cluster). threads_per_stage:
    CPUs each stage reserves and its kernels use (default: the cluster's CPUs shared out). compiled_graph:
    run through Ray's compiled graphs (a beta API) instead of classic actor calls; results are the same.
    strategy: how the placement group lays out the stages (PACK on few nodes, SPREAD across nodes).
    max_restarts: restarts of each stage's actor; a request caught by a death is retried from stage 0.
    timeout_s bounds the placement, the stages' loading and each request. target: what the stages are
    compiled for (kiln.build's; the nodes must run it). cost: the cost model the cuts are chosen by."""

    def __init__(self, model: Any, stages: int = 2, address: str | None = None, threads_per_stage: int | None = None,
                 compiled_graph: bool = False, *, strategy: str = "PACK", max_restarts: int = 3,
                 timeout_s: float = 120.0, target: Any = None, cost: CostModel | None = None) -> None:
        if threads_per_stage is not None and (not isinstance(threads_per_stage, int) or threads_per_stage < 1):
            raise KilnError(f"threads_per_stage must be a positive number of cores, got {threads_per_stage!r}")
        self._ray = ray = connect(address)
        threads = threads_per_stage or max(1, int(ray.cluster_resources().get("CPU", 1)) // max(1, stages))
        self.plan = plan_pipeline(model, stages, cost or CostModel(threads=threads))
        self._bundles = _bundles(ray, compile_stages(self.plan, target=target))  # held: a restart loads them again
        self._value_of = dict(self.plan.outputs)
        self._pg = reserve(ray, stages, threads, strategy, timeout_s)
        self._actors: list[Any] = []
        self._controller: Any = None
        self._closed = False
        try:
            self._actors = [start_stage(ray, self._pg, s, b, threads, max_restarts)
                            for s, b in zip(self.plan.stages, self._bundles, strict=True)]
            self.placement = self._wait_loaded(timeout_s)
            self._controller = self._make_controller(compiled_graph, timeout_s, max_restarts)
        except BaseException:
            self._release()
            raise

    @property
    def inputs(self) -> tuple[str, ...]:
        return self.plan.inputs

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(self._value_of)

    @property
    def actors(self) -> tuple[Any, ...]:
        """The stage actors in stage order (for tools that watch them, or kill one to test recovery)."""
        return tuple(self._actors)

    @property
    def report(self) -> str:
        """The plan's report (cut tensors, modelled times, bytes) and where each stage runs."""
        where = [f"stage {i}: pid {p['pid']} on node {p['node'][:12]}" for i, p in enumerate(self.placement)]
        return "\n".join([self.plan.report(), *where])

    @property
    def stats(self) -> dict[str, int]:
        """Requests answered, failed, and chains submitted again after an actor died."""
        return dict(self._controller.stats)

    def run(self, output_names: Sequence[str] | None, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """The outputs named (every output when None) for `feeds`, through every stage."""
        return self.run_async(output_names, feeds).result()

    def run_async(self, output_names: Sequence[str] | None, feeds: Mapping[str, np.ndarray]) -> Future:
        """`run` as a concurrent.futures.Future; many may be in flight, one stage each at a time."""
        names = list(output_names) if output_names else list(self._value_of)
        unknown = [n for n in names if n not in self._value_of]
        if unknown:
            raise KilnError(f"the model has no outputs {unknown}; its outputs are {list(self._value_of)}")
        missing = [n for n in self.inputs if n not in feeds]
        extra = [n for n in feeds if n not in self.inputs]
        if missing or extra:
            raise KilnError(f"feeds must name the model's inputs {list(self.inputs)}: missing {missing}, "
                            f"unknown {extra}")
        values = [self._value_of[n] for n in names]
        return self._controller.submit(dict(feeds), lambda got: [got[v] for v in values])

    def stage_counts(self) -> list[dict[str, int]]:
        """Per stage: requests its process ran and the bytes it received and handed on."""
        return self._ray.get([a.counts.remote() for a in self._actors])

    def close(self) -> None:
        """Stop the controller (open requests fail), kill the stage actors and free the placement group."""
        self._release()

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _wait_loaded(self, timeout_s: float) -> list[dict[str, Any]]:
        """Each stage's info once loaded; one DistributedError naming the first stage that did not load."""
        infos = []
        for stage, actor in zip(self.plan.stages, self._actors, strict=True):
            try:
                infos.append(self._ray.get(actor.info.remote(), timeout=timeout_s))
            except Exception as e:
                raise DistributedError(f"stage {stage.index} of {len(self._actors)} failed to load on its actor: "
                                       f"{e}") from e
        return infos

    def _make_controller(self, compiled_graph: bool, timeout_s: float, max_restarts: int) -> Any:
        if compiled_graph:
            from kiln.distributed.pipeline_compiled import CompiledController, compile_chain

            actors = self._actors
            return CompiledController(self._ray, lambda: compile_chain(actors, MAX_INFLIGHT, timeout_s), actors,
                                      timeout_s, MAX_INFLIGHT, max_restarts)
        from kiln.distributed.pipeline_requests import ChainController

        return ChainController(self._ray, self._actors, timeout_s, max_restarts)

    def _release(self) -> None:
        from ray.util.placement_group import remove_placement_group

        if self._controller is not None and not self._closed:
            self._controller.stop()  # it refuses new requests from now on
        self._closed = True
        for actor in self._actors:
            self._ray.kill(actor, no_restart=True)
        self._actors = []
        if self._pg is not None:
            remove_placement_group(self._pg)
            self._pg = None


def _bundles(ray: Any, models: Sequence[Any]) -> list[Any]:
    """Each compiled stage exported and packed into the object store (a ref each: restarts reuse it)."""
    refs = []
    with tempfile.TemporaryDirectory(prefix="kiln-pipeline-") as tmp:
        for i, model in enumerate(models):
            refs.append(ray.put(pack(model.export(Path(tmp) / f"stage{i}"))))
    return refs
