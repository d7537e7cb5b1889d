"""The Ray cluster a search runs on: a new private, loopback-only one with Ray's token auth, or one joined explicitly.

``nas`` never attaches to a cluster it happens to find on the machine (a ``ray start`` left in /tmp/ray):
without an address it starts its own (``ray.init(address="local")``); with ``--address`` / ``RAY_ADDRESS``
it joins that one. A cluster it starts keeps token authentication as Ray 2.60 sets it by default (Ray
generates ``~/.ray/auth_token`` on first use; nothing here sets ``RAY_AUTH_MODE``) and binds every service to
127.0.0.1. :data:`LOCAL_LISTENERS` lists what it listens on; the README's "Ray and auth" section mirrors it
and ``tests/test_cluster_security.py`` compares it with the sockets a real ``nas search`` opens.

>>> [entry.service for entry in LOCAL_LISTENERS][:2]
['GCS server', 'raylet']
>>> job_config("20261202-macro-evolution").metadata
{'job_name': '20261202-macro-evolution'}
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: Ray's switch for "multi-node clusters on this OS". Off, Ray keeps 127.0.0.1 as the node's address (as it does on
#: macOS and Windows) instead of replacing it by the machine's external address, and so binds its services there.
SINGLE_NODE_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
LOOPBACK = "127.0.0.1"


@dataclasses.dataclass(frozen=True)
class Listener:
    """One kind of listening socket of a local cluster: the service, the process that holds it (a fragment of
    its name or command line; ``driver`` is the ``nas`` process itself), and its port."""

    service: str
    process: str
    port: str


#: Every TCP socket a cluster started by ``nas`` listens on, all bound to 127.0.0.1 (the README mirrors this list).
LOCAL_LISTENERS: tuple[Listener, ...] = (
    Listener("GCS server", "gcs_server", "random"),
    Listener("raylet", "raylet", "random (node manager and object manager)"),
    Listener("core worker of the driver", "driver", "random"),
    Listener("core worker of each Ray worker and actor", "ray::", "random, one per process"),
    Listener("dashboard agent", "ray::DashboardAgent", "52365 (HTTP), random (gRPC, metrics export)"),
    Listener("runtime-env agent", "ray::RuntimeEnvAgent", "random"),
    Listener("autoscaler monitor metrics", "autoscaler/_private/monitor.py", "44217"),
    Listener("dashboard", "dashboard/dashboard.py", "8265 (UI and HTTP API, only with --dashboard), 44227 (metrics)"),
)


def job_config(run_name: str | None) -> Any:
    """A Ray JobConfig whose ``job_name`` (the dashboard's Name column) is the run's name."""
    from ray.job_config import JobConfig

    return JobConfig(metadata={"job_name": run_name} if run_name else {})


@contextlib.contextmanager
def _single_node() -> Iterator[None]:
    """While inside, Ray treats this machine as single-node, so a node address of 127.0.0.1 stays 127.0.0.1."""
    from ray._private import ray_constants

    before_env, before_flag = os.environ.get(SINGLE_NODE_ENV), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[SINGLE_NODE_ENV] = "0"  # inherited by the processes ray.init starts
    ray_constants.ENABLE_RAY_CLUSTER = False  # read at import, so set for this process too
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = before_flag
        if before_env is None:
            os.environ.pop(SINGLE_NODE_ENV, None)
        else:
            os.environ[SINGLE_NODE_ENV] = before_env


def start_local(*, num_cpus: int | None = None, dashboard: bool = False, run_name: str | None = None) -> str | None:
    """Start a new private Ray cluster on this machine, every service on 127.0.0.1, token auth as Ray sets it;
    returns the dashboard's URL (None without one)."""
    import ray

    with _single_node():
        ctx = ray.init(address="local", num_cpus=num_cpus, include_dashboard=dashboard, dashboard_host=LOOPBACK,
                       _node_ip_address=LOOPBACK, job_config=job_config(run_name), logging_level=logging.WARNING,
                       log_to_driver=False)
    restrict_token_file()
    return dashboard_url(ctx) if dashboard else None


def restrict_token_file() -> None:
    """Make the token file Ray generated (``~/.ray/auth_token``, written with the umask, often world-readable)
    readable by its owner only: on a shared machine, whoever reads it can join the cluster."""
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    with contextlib.suppress(OSError):
        if path.is_file() and path.stat().st_mode & 0o077 and path.stat().st_uid == os.getuid():
            path.chmod(0o600)


def join(address: str, *, run_name: str | None = None) -> str | None:
    """Join the cluster at ``address`` (given explicitly, or ``RAY_ADDRESS``); returns its dashboard's URL if any."""
    import ray

    loopback = "://" not in address and address.rsplit(":", 1)[0] in (LOOPBACK, "localhost")
    with _single_node() if loopback else contextlib.nullcontext():  # (else Ray swaps 127.0.0.1 for this host's IP)
        ctx = ray.init(address=address, job_config=job_config(run_name), logging_level=logging.WARNING,
                       log_to_driver=False)
    return dashboard_url(ctx)


def dashboard_url(ctx: Any) -> str | None:
    url = getattr(ctx, "dashboard_url", None)
    if not url:
        return None
    return url if "://" in url else f"http://{url}"
