"""Optuna samplers as a strategy: the distribution mapping, failures, samplers, search quality (no Ray)."""

from __future__ import annotations

import numpy as np
import pytest
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import TrialState as OptunaState

from nas.registry import spaces
from nas.run.snapshot import read_snapshot, write_snapshot
from nas.search_spaces.toy import ToySpace, toy_score, toy_search
from nas.strategies.optuna_sampler import SAMPLERS, OptunaStrategy
from nas.strategies.random import RandomSearch
from nas.types import Result, TrialState


def complete(trial, score):
    return Result(trial.trial_id, TrialState.COMPLETE, score=score)


def run(strategy, budget):
    return toy_search(strategy, budget, in_flight=3)


def test_ordered_numeric_decisions_are_int_distributions_the_rest_categorical():
    s = OptunaStrategy(spaces.get("macro")(), seed=0)
    assert s.distributions["depth"] == IntDistribution(0, 2)
    assert s.distributions["dropout"] == IntDistribution(0, 2)
    assert s.distributions["activation"] == CategoricalDistribution([0, 1, 2])
    t = s.ask()
    params = s.study.trials[-1].params
    assert {k: s.space.decisions[k][params[k]] for k in params} == t.arch


def test_failed_results_are_failed_optuna_trials():
    s = OptunaStrategy(ToySpace(), seed=0)
    a, b = s.ask(), s.ask()
    s.tell(a, Result.failed(a.trial_id, "NaN loss"))
    s.tell(b, complete(b, -2.0))
    assert [t.state for t in s.study.trials] == [OptunaState.FAIL, OptunaState.COMPLETE]
    assert s.study.best_value == -2.0 and not s.pending


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_every_sampler_searches_and_resumes_from_its_state(sampler, tmp_path):
    s = OptunaStrategy(ToySpace(), sampler=sampler, startup=3, seed=1)
    run(s, 5)  # leaves two trials in flight
    write_snapshot(tmp_path / "s.json", s.state_dict())
    restored = OptunaStrategy(ToySpace(), sampler=sampler, startup=3, seed=99)
    restored.load_state_dict(read_snapshot(tmp_path / "s.json"))
    a, b = [s.ask() for _ in range(3)], [restored.ask() for _ in range(3)]
    assert [t.to_dict() for t in a] == [t.to_dict() for t in b]
    for t in a:
        s.tell(t, complete(t, toy_score(t.arch)))
    assert len(s.study.trials) == 10 and len(s.pending) == 2


def test_cmaes_refuses_a_space_without_ordered_decisions():
    with pytest.raises(ValueError, match="sampler 'cmaes' needs decisions with ordered numeric options"):
        OptunaStrategy(spaces.get("nb201")(), sampler="cmaes")


@pytest.mark.parametrize(("options", "message"), [
    ({"sampler": "nsga"}, "unknown sampler 'nsga'; allowed: tpe, random, cmaes, gp"),
    ({"startup": -1}, "startup must be an integer >= 0, got -1"),
])
def test_bad_options_are_named(options, message):
    with pytest.raises(ValueError, match=message):
        OptunaStrategy(ToySpace(), **options)


def test_tpe_beats_random_search():
    """10 fixed seeds, 60 trials each with 3 in flight (constant liar) in a 3,125-cell space."""
    tpe = [run(OptunaStrategy(ToySpace(), seed=s), 60) for s in range(10)]
    rnd = [run(RandomSearch(ToySpace(), seed=s), 60) for s in range(10)]
    assert np.mean(tpe) > np.mean(rnd) + 1.5
    assert sum(b == 0.0 for b in tpe) >= 5
