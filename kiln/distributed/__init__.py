"""Kiln on Ray (issue 29): pipelined stages and replicas of a model on Ray actors.

Ray is optional (`pip install 'kiln[ray]'`) and is imported only when one of these names is used, so
`import kiln` and `make test` work without it. Kiln never builds a cluster layer of its own: actors,
ObjectRefs, placement groups and the object store are Ray's.

The pieces every distributed path shares: ray_env (importing Ray with a clear error, connecting to
a cluster or starting a local one), bundle (a compiled model's directory as bytes, sent through the
object store, since the nodes of a real cluster share no disk) and model_worker (the object a Ray
actor holds: one loaded Kiln model that runs feeds). On them: Pipeline (a model cut into stages on
actors in one placement group, requests as chains of ObjectRefs; plan_pipeline chooses the cuts),
ReplicaSet (N copies of a model behind least-loaded routing, with retries when an actor dies; `kiln
serve --ray` serves with it) and serve_deployment (a Kiln model as a Ray Serve deployment).
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE: dict[str, str] = {"ModelWorker": "kiln.distributed.model_worker", "connect": "kiln.distributed.ray_env",
                          "require_ray": "kiln.distributed.ray_env",
                          "Pipeline": "kiln.distributed.pipeline", "plan_pipeline": "kiln.distributed.stage_plan",
                          "ReplicaSet": "kiln.distributed.replica_set",
                          "serve_deployment": "kiln.distributed.ray_serve"}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    """A public name, imported on first use (so importing this package imports no Ray)."""
    if name not in _WHERE:
        raise AttributeError(f"module 'kiln.distributed' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value
