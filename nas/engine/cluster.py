"""The Ray cluster a search runs on: a new private, loopback-only one with Ray's token auth, or one joined explicitly.

``nas`` never attaches to a cluster it happens to find on the machine (a ``ray start`` left in /tmp/ray):
without an address it starts its own (``ray.init(address="local")``); with ``--address`` / ``RAY_ADDRESS``
it joins that one. A cluster it starts keeps token authentication as Ray 2.60 sets it by default (Ray
generates ``~/.ray/auth_token`` on first use; nothing here sets ``RAY_AUTH_MODE``) and binds every service to
127.0.0.1. :data:`LOCAL_LISTENERS` lists what it listens on; docs/cluster.md ("Ray and auth") mirrors it
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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

#: Ray's switch for "multi-node clusters on this OS". Off, Ray keeps 127.0.0.1 as the node's address (as it does on
#: macOS and Windows) instead of replacing it by the machine's external address, and so binds its services there.
SINGLE_NODE_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
LOOPBACK = "127.0.0.1"
AUTH_MODE_ENV = "RAY_AUTH_MODE"
#: Ray 2.60's warning when it turns token auth on for a local cluster, and its logger
RAY_AUTH_WARNING = "Token authentication is enabled for this Ray cluster"
RAY_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"
log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Listener:
    """One kind of listening socket of a local cluster: the service, the process that holds it (a fragment of
    its name or command line; ``driver`` is the ``nas`` process itself), and its port."""

    service: str
    process: str
    port: str


#: Every TCP socket a cluster started by ``nas`` listens on, all bound to 127.0.0.1 (docs/cluster.md mirrors this list).
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


def workers_text(workers: int, trial_workers: int = 1) -> str:
    """How many workers a search starts, in words.

    >>> workers_text(2), workers_text(1), workers_text(2, trial_workers=4)
    ('2 workers', '1 worker', '2 gangs of 4 ranks')
    """
    if trial_workers > 1:
        return f"{workers} gang{'s' * (workers != 1)} of {trial_workers} ranks"
    return f"{workers} worker{'s' * (workers != 1)}"


def where_text(executor: str, address: str | None, workers: int, trial_workers: int = 1) -> str:
    """Where a search's trials will run, in words, before anything starts (``address``: the one given, or
    ``RAY_ADDRESS``).

    >>> where_text("ray", None, 2)
    '2 workers on a private local Ray cluster (127.0.0.1 only), started now'
    >>> where_text("ray", "10.0.0.5:6379", 8)
    '8 workers on the Ray cluster at 10.0.0.5:6379'
    >>> where_text("inprocess", None, 2)
    'in this process (executor inprocess)'
    """
    if executor not in ("ray",):
        return f"in this process (executor {executor})"
    if address:
        return f"{workers_text(workers, trial_workers)} on the Ray cluster at {address}"
    return f"{workers_text(workers, trial_workers)} on a private local Ray cluster ({LOOPBACK} only), started now"


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


def start_local(*, num_cpus: int | None = None, dashboard: bool = False, run_name: str | None = None,
                notify: Callable[[str], None] | None = None) -> str | None:
    """Start a new private Ray cluster on this machine, every service on 127.0.0.1, token auth as Ray sets it;
    returns the dashboard's URL (None without one). ``notify`` (default: the log) hears :func:`auth_line` in place
    of Ray's own warning, which tells you how to turn auth off and nothing of what the cluster listens on."""
    import ray

    with _single_node(), _without_ray_auth_warning(), _keeping_sigterm():
        ctx = ray.init(address="local", num_cpus=num_cpus, include_dashboard=dashboard, dashboard_host=LOOPBACK,
                       _node_ip_address=LOOPBACK, job_config=job_config(run_name), logging_level=logging.WARNING,
                       log_to_driver=False)
    restrict_token_file()
    (notify or log.info)(auth_line(os.environ.get(AUTH_MODE_ENV)))
    return dashboard_url(ctx) if dashboard else None


def auth_line(mode: str | None) -> str:
    """What a local cluster started with Ray's auth ``mode`` (``RAY_AUTH_MODE`` after ``ray.init``) lets in.

    >>> auth_line("token")
    'Ray token auth on: every port on 127.0.0.1, and only processes with your token (~/.ray/auth_token) can join'
    >>> auth_line("disabled").split(":")[0]
    'Ray token auth OFF (RAY_AUTH_MODE=disabled in the environment)'
    """
    if (mode or "").lower() == "token":
        return ("Ray token auth on: every port on 127.0.0.1, and only processes with your token (~/.ray/auth_token) "
                "can join")
    return (f"Ray token auth OFF ({AUTH_MODE_ENV}={mode} in the environment): every port on 127.0.0.1, but any user of "
            "this machine can join")


class _DropAuthWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(RAY_AUTH_WARNING)


@contextlib.contextmanager
def _without_ray_auth_warning() -> Iterator[None]:
    """While inside, Ray's "Token authentication is enabled ... Set RAY_AUTH_MODE=disabled to opt out" warning is
    not printed (:func:`auth_line` says what holds instead)."""
    logger, dropped = logging.getLogger(RAY_AUTH_LOGGER), _DropAuthWarning()
    logger.addFilter(dropped)
    try:
        yield
    finally:
        logger.removeFilter(dropped)


def restrict_token_file() -> None:
    """Make the token file Ray generated (``~/.ray/auth_token``, written with the umask, often world-readable)
    readable by its owner only: on a shared machine, whoever reads it can join the cluster."""
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    with contextlib.suppress(OSError):
        if path.is_file() and path.stat().st_mode & 0o077 and path.stat().st_uid == os.getuid():
            path.chmod(0o600)


def check_reachable(address: str, *, timeout: float = 10.0) -> None:
    """A one-line ValueError where nothing answers at the cluster address ``host:port`` (or ``ray://host:port``):
    ``ray.init`` would retry for minutes before it gave up. ``auto``, ``local`` and other forms are Ray's to read."""
    import socket

    if "://" in address and not address.startswith("ray://"):
        raise ValueError(f"{address!r} is not a Ray cluster's address: give its head's host:port (port 6379 by "
                         f"default), not the dashboard's URL")
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit() or "://" in host:
        return
    if not 0 < int(port) < 65536:
        raise ValueError(f"the port of the Ray cluster's address {address!r} is out of range: 1 to 65535")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        why = f"no answer within {timeout:g} s" if isinstance(e, TimeoutError) else e.strerror or str(e)
        raise ValueError(f"cannot reach the Ray cluster at {address!r}: {why}; start it (ray start --head) or give "
                         f"its head's address (host:port, port 6379 by default)") from None


def join(address: str, *, run_name: str | None = None) -> str | None:
    """Join the cluster at ``address`` (given explicitly, or ``RAY_ADDRESS``); returns its dashboard's URL if any."""
    import ray
    import ray.exceptions

    check_reachable(address)

    loopback = "://" not in address and address.rsplit(":", 1)[0] in (LOOPBACK, "localhost")
    single = _single_node() if loopback else contextlib.nullcontext()  # (else Ray swaps 127.0.0.1 for this host's IP)
    try:
        with single, _keeping_sigterm():
            ctx = ray.init(address=address, job_config=job_config(run_name), logging_level=logging.WARNING,
                           log_to_driver=False)
    except ConnectionError as e:  # (``auto`` where no cluster runs here: Ray's words name its own flags)
        if address == "auto":
            raise ValueError("no Ray cluster runs on this machine for the address 'auto': start one (ray start "
                             "--head) or give its head's address (host:port)") from None
        # (the port answered, so most often the cluster's token auth refused this process: Ray says only "Failed
        # to connect", its "Unauthenticated" is in the C++ log lines above)
        raise ValueError(f"cannot join the Ray cluster at {address!r}: {str(e).splitlines()[0]}; its port answers, "
                         f"so either its token auth refused this process (no token, or not its token: {TOKEN_HINT}) "
                         f"or what answers there is not a Ray cluster's head") from None
    except ray.exceptions.AuthenticationError as e:  # (the token named could not be read: a traceback before)
        why = str(e).splitlines()[0].partition(". Ensure ")[0]
        raise ValueError(f"cannot join the Ray cluster at {address!r}: no token to give it ({why}): "
                         f"{TOKEN_HINT}") from None
    return dashboard_url(ctx)


#: What a driver joining a cluster with token auth needs (docs/cluster.md, "A real cluster with token auth")
TOKEN_HINT = ("set RAY_AUTH_MODE=token and the cluster's token in RAY_AUTH_TOKEN, or RAY_AUTH_TOKEN_PATH naming a "
              "readable file that holds it")


@contextlib.contextmanager
def _keeping_sigterm() -> Iterator[None]:
    """Keep a Python SIGTERM handler set before ``ray.init`` (``nas search``'s graceful stop): Ray's driver puts its
    own in place (a stack dump and exit 15, the run left 'failed'). Where none was set, Ray's stays."""
    import signal
    import threading

    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGTERM) if main else None
    try:
        yield
    finally:
        if callable(before):
            signal.signal(signal.SIGTERM, before)


def dashboard_url(ctx: Any) -> str | None:
    url = getattr(ctx, "dashboard_url", None)
    if not url:
        return None
    return url if "://" in url else f"http://{url}"
