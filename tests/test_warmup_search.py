"""A strategy's zero-cost warm-up (``-o warmup=PROXY:M:K``) in a search: its M candidates are scored in the driver
before the first ask, and the search starts from the proxy's top K. (Only ``nas bench strategies`` scored them:
every search with the documented option failed at its first ask, "needs its M candidates scored".)"""

from __future__ import annotations

import numpy as np
import pytest

import nas
from nas.core.space import Task
from nas.parts import build_strategy
from nas.search_spaces.nb201 import NB201Space
from nas.search_spaces.toy import ToySpace
from nas.train.proxies import cifar_like_batch, minibatch, score_archs
from nas.train.simple import noop


def top(space, strategy, options, proxy, task, x, y, k, seed=0):
    """The proxy's top ``k`` of the candidates the strategy draws, scored apart from the search."""
    fresh = build_strategy(strategy, space, seed, options, ["val_acc:max"])
    candidates = fresh.warmup_candidates()
    values = score_archs(space, candidates, task, names=[proxy], x=x, y=y, seed=seed)[proxy]
    order = sorted(range(len(values)), key=lambda i: -values[i])
    return [space.format(candidates[i]) for i in order[:k]]  # (as the results' arch column shows them)


@pytest.mark.parametrize("strategy", ["evolution", "local", "predictor"])
def test_a_simulated_search_starts_from_the_proxys_top_k(tmp_path, strategy):
    options = {"warmup": "synflow:30:4"}
    df = nas.search("nb201", strategy, budget=8, executor="simulated", seed=0, run_dir=tmp_path / "run",
                    progress=False, strategy_options=options)
    expected = top(NB201Space(), strategy, options, "synflow", Task((3, 32, 32), 10), *cifar_like_batch(32, 0), 4)
    assert df.sort_values("trial_id").arch.head(4).tolist() == expected
    resumed = nas.search("nb201", strategy, budget=12, executor="simulated", seed=0, run_dir=tmp_path / "run",
                         progress=False, strategy_options=options, resume=True)  # (the warm-up answered again)
    assert len(resumed) == 12 and resumed.trial_id.is_unique


def test_a_trained_search_scores_its_candidates_on_its_own_data(tmp_path):
    digits = nas.load_dataset("digits")
    options = {"warmup": "naswot:12:3", "population": 4, "sample_size": 2}
    df = nas.search(ToySpace(), "evolution", budget=4, executor="inprocess", data=digits, seed=0, epochs=1,
                    run_dir=tmp_path / "run", progress=False, strategy_options=options)
    x, y = minibatch(digits.x_train, digits.y_train, 32, 0)
    expected = top(ToySpace(), "evolution", options, "naswot", digits.task, x, y, 3)
    assert df.sort_values("trial_id").arch.head(3).tolist() == expected
    assert np.isfinite(df.score).all()


def test_a_warm_up_with_no_data_to_build_for_is_refused_before_anything_is_made(tmp_path):
    with pytest.raises(ValueError, match=r"warmup=synflow:20:3 builds its candidates for the run's data, and this "
                                         r"run has none \(dataset none\): leave the option out"):
        nas.search(ToySpace(), "evolution", budget=4, executor="inprocess", data=None, train=noop, seed=0,
                   run_dir=tmp_path / "run", progress=False, strategy_options={"warmup": "synflow:20:3"})
    assert not (tmp_path / "run").exists()
