"""ParEGO's random scalarization around single-objective strategies, and which strategies take several
objectives natively, are wrapped, or are refused."""

from __future__ import annotations

import numpy as np
import pytest
from test_mo_evolution import REFERENCE, result, run, true_front, two_scores

from nas.api import make_strategy
from nas.core.objectives import hypervolume, nondominated
from nas.core.registry import strategies
from nas.core.scalarize import Scalarized, check_objectives, for_objectives
from nas.core.types import FailureKind, Outcome, Result, TrialState
from nas.run.snapshot import read_snapshot, write_snapshot
from nas.search_spaces.toy import ToySpace
from nas.strategies.evolution import RegularizedEvolution
from nas.strategies.local import LocalSearch
from nas.strategies.random import RandomSearch

OBJ = ["val_acc", "latency_ms:min"]


class Recorder(RandomSearch):
    """Random search that keeps what it is told (to see the scalarized results)."""

    def __init__(self, space, *, seed=None):
        super().__init__(space, seed=seed)
        self.told = []

    def tell(self, trial, result):
        super().tell(trial, result)
        self.told.append(result)


def test_the_augmented_chebyshev_value_by_hand():
    s = Scalarized(Recorder(ToySpace(), seed=0), OBJ, seed=0, rho=0.1)
    t = s.ask()
    s.low, s.high = [0.5, -30.0], [0.9, -10.0]
    out = s.scalarize(result(t, [0.6, -15.0]), [0.25, 0.75])
    d = np.array([(0.9 - 0.6) / 0.4, (-10 + 15) / 20])
    expected = -(max(0.25 * d[0], 0.75 * d[1]) + 0.1 * (0.25 * d[0] + 0.75 * d[1]))
    assert out.score == pytest.approx(expected) and out.scores == [out.score] and out.ok
    # a point better than every bound moves the bounds and scores 0 (the ideal)
    assert s.scalarize(result(t, [1.0, -5.0]), [0.5, 0.5]).score == 0.0 and s.high == [1.0, -5.0]


def test_each_ask_gets_its_own_weights_and_failures_pass_through():
    inner = Recorder(ToySpace(), seed=0)
    s = Scalarized(inner, OBJ, seed=1)
    trials = [s.ask() for _ in range(3)]
    weights = [s._weights[t.trial_id] for t in trials]
    assert all(abs(sum(w) - 1) < 1e-12 and min(w) >= 0 for w in weights) and weights[0] != weights[1]
    s.tell(trials[0], Result.failed(trials[0].trial_id, "latency 80 > 50", failure=FailureKind.INFEASIBLE))
    assert inner.told[0].state is TrialState.FAILED and s.low is None  # no bounds from an infeasible trial
    s.tell(trials[1], result(trials[1], [0.9, -10.0]))
    s.tell(trials[2], result(trials[2], [0.5, -5.0]))
    middling = -(0.5 * max(weights[1]) + 0.05 * 0.5)  # the first feasible result: no span yet, every d_i 0.5
    assert s._weights == {} and [r.score for r in inner.told[1:]] == [pytest.approx(middling),
                                                                     pytest.approx(-weights[2][0] * 1.05)]
    with pytest.raises(ValueError, match=r"trial 7's result has scores \[1.0\]; this run has 2 objectives"):
        s.scalarize(Result(7, Outcome.COMPLETE, score=1.0, scores=[1.0]), [0.5, 0.5])


class TellingLocal(LocalSearch):
    """Local search that keeps the scores it is told, by trial id."""

    def __init__(self, space, **options):
        super().__init__(space, **options)
        self.told = {}

    def tell(self, trial, result):
        self.told[trial.trial_id] = result.score
        super().tell(trial, result)


def test_the_first_result_is_not_told_the_best_score_so_local_search_starts_from_the_best_of_its_start():
    # (the first result's bounds had no span, so it was told 0.0, the best score there is: multi-objective local
    # search took trial 0 as its incumbent in every seed, dominated or not, and could never move from it)
    moved = []
    for seed in range(8):
        s = for_objectives(TellingLocal(ToySpace(), seed=seed, init=10), ["acc", "cost:min"], seed=seed)
        archs = []
        while s.inner.incumbent is None:
            t = s.ask()
            archs.append(dict(t.arch))
            s.tell(t, result(t, two_scores(t.arch)))
        told = s.inner.told
        assert len(told) == 10 and -0.55 < told[0] < 0 and max(told.values()) > told[0]
        first = archs.index(s.inner.incumbent)
        assert first != 0 and told[first] == max(told.values())  # the best of the start by the scalarization
        incumbent = s.inner.incumbent
        while s.inner.incumbent is not None and not s.inner.restarts and s.inner.incumbent == incumbent:
            t = s.ask()
            s.tell(t, result(t, two_scores(t.arch)))
        moved.append(s.inner.incumbent not in (None, incumbent))
    assert any(moved)  # a first climb moves (seeds 0 and 6; none before)


def test_state_round_trips_through_a_snapshot_and_asks_resume_the_same(tmp_path):
    def make(seed):
        return Scalarized(RegularizedEvolution(ToySpace(), population=6, sample_size=2, seed=seed), OBJ, seed=seed)

    a = make(0)
    run(a, 20)
    t = a.ask()  # one in flight at the snapshot
    write_snapshot(tmp_path / "s.json", a.state_dict())
    b = make(5)
    b.load_state_dict(read_snapshot(tmp_path / "s.json"))
    assert b._weights == a._weights and b.low == a.low
    for s in (a, b):
        s.tell(t, result(t, two_scores(t.arch)))
    assert run(a, 20).tolist() == run(b, 20).tolist()


def test_who_takes_several_objectives():
    support = {name: cls.multi_objective for name, cls in strategies.items()}
    assert support["evolution"] == support["random"] == support["optuna"] == "native"
    assert support["rl"] == "scalarize" and support["pbt"] == "refuse"
    with pytest.raises(ValueError) as err:
        check_objectives(strategies.get("pbt"), OBJ)
    assert str(err.value).startswith("strategy 'pbt' cannot search several objectives (val_acc, latency_ms:min): "
                                     "it trains its members in segments")
    assert "use one of " in str(err.value) and "pbt" not in str(err.value).split("use one of")[1]
    assert "\n" not in str(err.value)
    check_objectives(strategies.get("pbt"), ["val_acc"])  # one objective: pbt runs as ever


def test_for_objectives_wraps_only_what_needs_it():
    space = ToySpace()
    rl = make_strategy("rl", space, seed=0)
    wrapped = for_objectives(rl, OBJ, seed=0)
    assert isinstance(wrapped, Scalarized) and wrapped.inner is rl and wrapped.name == "parego(rl)"
    evo = make_strategy("evolution", space, seed=0)
    assert for_objectives(evo, OBJ) is evo and for_objectives(rl, ["val_acc"]) is rl
    pts = run(wrapped, 30)  # the RL controller learns from the scalarized scores
    assert pts.shape == (30, 2)


def test_scalarized_evolution_finds_more_of_the_known_front_than_random_search():
    best = hypervolume(true_front(), REFERENCE)
    par, rnd = [], []
    for seed in range(5):
        for strategy, out in ((Scalarized(RegularizedEvolution(ToySpace(), population=20, sample_size=5, seed=seed),
                                          OBJ, seed=seed), par), (RandomSearch(ToySpace(), seed=seed), rnd)):
            points = run(strategy, 300)
            out.append(hypervolume(points[nondominated(points)], REFERENCE) / best)
    assert np.mean(par) > np.mean(rnd), (par, rnd)
