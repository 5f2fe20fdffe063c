"""A pipeline's gang: one placement group holding every stage's CPUs, and the stage actors placed in it.

The group is reserved atomically (Pathways' gang scheduling): either every stage gets its cores or
none is placed, so two pipelines that each fit alone cannot deadlock holding half a cluster each.
A cluster that cannot hold the group is an error after `timeout_s`, not a wait forever. Each actor
restarts up to `max_restarts` times; Ray does not retry its calls (max_task_retries=0), because the
controller retries a failed request from its first stage and must be the only one that does.
"""

from __future__ import annotations

from typing import Any

from kiln.distributed.ray_env import worker_env
from kiln.distributed.stage_plan import Stage
from kiln.distributed.stage_worker import StageWorker
from kiln.errors import DistributedError

STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


def reserve(ray: Any, stages: int, threads: int, strategy: str, timeout_s: float) -> Any:
    """A ready placement group of `stages` bundles of `threads` CPUs; a DistributedError when it cannot be held."""
    from ray.util.placement_group import placement_group, remove_placement_group

    if strategy not in STRATEGIES:
        raise DistributedError(f"placement strategy {strategy!r} is not one of {', '.join(STRATEGIES)}")
    pg = placement_group([{"CPU": threads}] * stages, strategy=strategy)
    try:
        ray.get(pg.ready(), timeout=timeout_s)
    except ray.exceptions.GetTimeoutError as e:
        remove_placement_group(pg)
        have = ray.cluster_resources().get("CPU", 0)
        raise DistributedError(f"the Ray cluster could not hold {stages} stage(s) of {threads} CPU(s) "
                               f"({strategy}) within {timeout_s:g} s; it has {have:g} CPU(s) in all") from e
    return pg


def start_stage(ray: Any, pg: Any, stage: Stage, bundle_ref: Any, threads: int, max_restarts: int) -> Any:
    """Stage `stage`'s actor in bundle `stage.index` of `pg`, loading the stage from `bundle_ref`."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    placement = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=stage.index)
    actor = ray.remote(StageWorker).options(num_cpus=threads, max_restarts=max_restarts, max_task_retries=0,
                                            scheduling_strategy=placement, runtime_env=worker_env())
    return actor.remote(bundle_ref, threads, stage.index, stage.inputs, stage.forward)

