"""Zero-cost proxies on the Ray workers: a search whose objective is a proxy (``nas.train.proxies:score``) scores
its candidates on two real trainer actors of a real local Ray cluster, each on its own worker's data and device,
and the proxy constraint (``proxy_screen``) rejects candidates there before they train."""

from __future__ import annotations

import pytest

import nas
from nas.search_spaces.nb201 import NB201Space

pytestmark = pytest.mark.ray


def test_a_proxy_objective_is_scored_on_two_ray_workers(ray_local, tmp_path):
    df = nas.search(NB201Space(channels=4), "random", budget=4, workers=2, seed=0, run_dir=tmp_path / "run",
                    executor="ray", data="digits", train_function="nas.train.proxies:score",
                    objectives=["synflow", "params:min"], batch_size=16)
    assert len(df) == 4 and (df["state"] == "COMPLETE").all()
    assert df["worker"].nunique() == 2  # the first two trials went to the two idle actors at once
    for metrics, scores in zip(df["metrics"], df["scores"]):
        assert metrics["synflow"] > 0 and scores == [metrics["synflow"], -metrics["params"]]
        assert "val_acc" not in metrics


def test_the_proxy_constraint_rejects_candidates_on_the_ray_workers(ray_local, tmp_path):
    df = nas.search(NB201Space(channels=4), "random", budget=2, workers=2, seed=0, run_dir=tmp_path / "run",
                    executor="ray", data="digits", epochs=1, proxy_screen="synflow:1e300")
    assert len(df) == 2 and (df["failure"] == "INFEASIBLE").all()
    assert df["error"].str.contains("synflow").all() and df["error"].str.contains("< minimum").all()
