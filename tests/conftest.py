"""Shared fixtures. Ray starts once per test session (2 CPUs, no dashboard) and only for tests that ask."""

from __future__ import annotations

import functools
import logging
import os

import pytest

from nas.search_spaces.toy import ToySpace, toy_score
from nas.trainer import ScoreTrainer

# Test set-up only (README, "Ray and auth"): subprocess tests join the session's private cluster by address, which
# with token auth would need RAY_AUTH_MODE=token and the token in each, and a test run must not write a token into
# the developer's ~/.ray. tests/test_cluster_security.py removes it to test the production set-up.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


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
        # address="local": always a private cluster, never one that a `ray start` elsewhere left running
        ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level=logging.WARNING,
                 log_to_driver=False)
    return ray


@pytest.fixture
def toy_trainer():
    return functools.partial(ScoreTrainer, score_fn=toy_score)


@pytest.fixture
def toy_space():
    return ToySpace()
