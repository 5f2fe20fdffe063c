"""Ray, imported on demand with an error that says how to get it, and a connection to a cluster.

`connect(address)` joins an existing cluster ("auto", "ray://host:port" or "host:port") or, with no
address, starts a local one on this machine's cores; a process that is already connected keeps its
connection. A cluster that cannot be reached is a DistributedError naming the address, not a hang.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

from kiln.errors import DistributedError

INSTALL_HINT = "pip install 'kiln[ray]'"


def require_ray() -> ModuleType:
    """The `ray` module; a DistributedError saying how to install it when it is missing."""
    try:
        import ray
    except ImportError as e:
        raise DistributedError(f"Kiln's distributed runs need Ray, which is not installed ({e}): {INSTALL_HINT}") from e
    return ray


def connect(address: str | None = None, num_cpus: int | None = None) -> ModuleType:
    """Connect this process to Ray once: to the cluster at `address`, or a new local one with `num_cpus`
    CPUs (every core when None). Returns the `ray` module."""
    ray = require_ray()
    if ray.is_initialized():
        return ray
    if address is not None and num_cpus is not None:
        raise DistributedError("num_cpus is for a local cluster Kiln starts; an existing cluster at "
                               f"{address!r} has its own resources")
    try:
        ray.init(address=address, num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
                 configure_logging=False, runtime_env=worker_env())
    except (ConnectionError, TimeoutError, RuntimeError) as e:
        where = f"the Ray cluster at {address!r}" if address else "a local Ray cluster"
        raise DistributedError(f"could not connect to {where}: {e}") from e
    return ray


def worker_env() -> dict | None:
    """The job's runtime environment: a Kiln run from a source checkout (not installed) puts its directory
    on the workers' PYTHONPATH, since a cluster started by `ray start` does not inherit this process's
    environment; an installed Kiln is found by the workers' own Python (None: nothing to add)."""
    root = Path(__file__).resolve().parents[2]
    if {"site-packages", "dist-packages"} & set(root.parts):
        return None
    paths = [str(root), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {"env_vars": {"PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}}
