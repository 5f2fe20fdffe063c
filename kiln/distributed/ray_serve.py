"""A Kiln model as a Ray Serve deployment, for users already on Ray Serve (their autoscaling, routing and
HTTP proxy; Kiln's own front end is `kiln serve --ray`).

`serve_deployment(model)` compiles an ONNX file here (or takes a compiled directory or model), ships it
as a bundle in the deployment's arguments, and returns the bound deployment for `serve.run`. A replica
answers a dict of arrays with a dict of arrays (a handle call), or the JSON body
{"inputs": {name: nested list}, "outputs": [names]} with {"outputs": {name: nested list}} (HTTP).
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kiln.distributed.bundle import Bundle
from kiln.distributed.model_worker import ModelWorker
from kiln.distributed.ray_env import require_ray
from kiln.distributed.replica_set import as_bundle
from kiln.errors import DistributedError, InputError

if TYPE_CHECKING:
    from kiln.runtime.model import Model

GRAPH_FILE = "model.json"  # a compiled directory's graph and interface (kiln.runtime.artifact)


class KilnDeployment:
    """One Ray Serve replica: the model loaded from its bundle with `threads` cores."""

    def __init__(self, bundle: Bundle, threads: int | None = None, name: str = "kiln") -> None:
        self._worker = ModelWorker(bundle, threads, name)
        self._dtypes = {i["name"]: np.dtype(i["dtype"]) for i in json.loads(bundle[GRAPH_FILE])["inputs"]}

    async def __call__(self, request: Any) -> dict:
        """{output name: array} for a dict of feeds; the JSON answer for an HTTP request."""
        if isinstance(request, dict):
            return await asyncio.to_thread(self._worker.run, request)
        doc = await request.json()
        feeds, outputs = self._from_json(doc)
        results = await asyncio.to_thread(self._worker.run, feeds, outputs)
        return {"outputs": {n: a.tolist() for n, a in results.items()}}

    def _from_json(self, doc: Any) -> tuple[dict[str, np.ndarray], list[str] | None]:
        """The feeds of {"inputs": {name: nested list}, "outputs": [names]}, each as its input's dtype."""
        if not isinstance(doc, dict) or not isinstance(doc.get("inputs"), dict):
            raise InputError('the request body must be {"inputs": {name: nested list}, "outputs": [names]}')
        unknown = [n for n in doc["inputs"] if n not in self._dtypes]
        if unknown:
            raise InputError(f"the model has no input '{unknown[0]}' (inputs: {', '.join(self._dtypes)})")
        feeds = {n: np.asarray(v, dtype=self._dtypes[n]) for n, v in doc["inputs"].items()}
        return feeds, doc.get("outputs")


def serve_deployment(model: str | os.PathLike | Model | Bundle, name: str = "kiln", num_replicas: int = 1,
                     threads: int | None = None, target: str | None = None, **options: Any) -> Any:
    """The bound Ray Serve deployment (an Application for `serve.run`) of `model`: an .onnx file (compiled
    here for `target`, default this machine), a compiled directory, a built or loaded model, or a bundle.
    `options` go to `serve.deployment` (e.g. autoscaling_config, max_ongoing_requests)."""
    require_ray()
    try:
        from ray import serve
    except ImportError as e:
        raise DistributedError(f"serve_deployment needs Ray Serve ({e}): pip install 'ray[serve]'") from None
    if isinstance(num_replicas, bool) or not isinstance(num_replicas, int) or num_replicas < 1:
        raise DistributedError(f"num_replicas={num_replicas!r}: expected an integer >= 1")
    deployment = serve.deployment(KilnDeployment, name=name, num_replicas=num_replicas,
                                  ray_actor_options={"num_cpus": threads or 1}, **options)
    return deployment.bind(_bundle(model, target), threads, name)


def _bundle(model: str | os.PathLike | Model | Bundle, target: str | None) -> Bundle:
    """The bundle of `model`; an ONNX file is compiled first."""
    if isinstance(model, (str, os.PathLike)) and Path(model).suffix == ".onnx":
        from kiln.compiler import build

        if not Path(model).is_file():
            raise DistributedError(f"{model} is not a file")
        return as_bundle(build(str(model), target=target))
    return as_bundle(model)
