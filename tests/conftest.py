"""Shared fixtures. Ray starts once per test session (2 CPUs, no dashboard) and only for tests that ask."""

from __future__ import annotations

import math
import os
import select
import time
from pathlib import Path

import pytest

from nas.core.strategy import Strategy
from nas.engine.inprocess import InProcessExecutor
from nas.engine.loop import SearchLoop
from nas.search_spaces.toy import ToySpace, toy_score
from nas.train.simple import scored

# Test set-up only (docs/cluster.md, "Ray and auth"):
# subprocess tests join the session's private cluster by address, which
# with token auth would need RAY_AUTH_MODE=token and the token in each, and a test run must not write a token into
# the developer's ~/.ray. tests/test_cluster_security.py removes it to test the production set-up.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def toy_search(strategy: Strategy, budget: int, *, in_flight: int = 1) -> float:
    """The best :func:`toy_score` that ``strategy`` finds in ``budget`` trials with ``in_flight`` trials
    outstanding (the real loop on the in-process executor, ``in_flight`` slots: a strategy study).

    """
    executor = InProcessExecutor(strategy.space, None, train=scored(toy_score), slots=in_flight)
    results = SearchLoop(strategy, executor, budget=budget).run()
    return max((r.score for _, r in results if r.ok and r.score is not None), default=-math.inf)


@pytest.fixture(scope="session")
def _ray_session():
    import ray

    yield
    if ray.is_initialized():
        ray.shutdown()


@pytest.fixture
def ray_local(_ray_session):
    """A real local Ray cluster with 2 CPUs (started on first use, shared by the session)."""
    import ray

    if not ray.is_initialized():
        from nas.engine.cluster import start_local

        start_local(num_cpus=2)  # a private cluster, every service bound to 127.0.0.1, as `nas search` starts
    return ray


@pytest.fixture
def toy_train():
    return scored(toy_score)


@pytest.fixture
def toy_space():
    return ToySpace()


@pytest.fixture
def nas_cli(capsys):
    """``nas_cli(*argv)``: the ``nas`` command line run in this process: (exit code, stdout, stderr); argparse's
    own refusal of a flag's value is its exit code 2, as in a shell."""
    from nas.cli import main

    def run(*argv: str) -> tuple[int, str, str]:
        try:
            code = main(list(argv))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def keep_threads():
    """The process's torch thread count, put back after the test (for tests that set it, or run code that does)."""
    import torch

    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def one_thread(keep_threads):
    """Tiny torch work in the test process on one thread (two threads of small convolutions run ~20x slower on a
    busy machine); a module takes it with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    import torch

    torch.set_num_threads(1)


class Signal:
    """A one-shot signal from a worker process (a Ray actor) to the test, without sleeps or polling: a FIFO at
    ``path``. The worker writes one line (``with open(path, "w") as f: f.write(text + "\\n")``; its open waits
    until the test reads); :meth:`wait` blocks until that line arrives (at most ``timeout`` seconds) and returns it."""

    def __init__(self, path: Path) -> None:
        os.mkfifo(path)
        self.path = str(path)

    def wait(self, timeout: float = 60.0) -> str:
        fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)  # (no writer yet: select waits for one to write)
        try:
            data, deadline = b"", time.monotonic() + timeout
            while not data.endswith(b"\n"):
                ready, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0.0))
                chunk = os.read(fd, 4096) if ready else b""
                if not chunk:
                    raise AssertionError(f"no signal on {self.path} within {timeout} s (got {data!r})")
                data += chunk
            return data.decode().strip()
        finally:
            os.close(fd)


@pytest.fixture
def signals(tmp_path):
    """``signals(name)``: a new :class:`Signal` in the test's temporary directory."""
    return lambda name: Signal(tmp_path / name)
