"""Multi-objective regularized evolution: crowded tournament, age-based removal, infeasible trials kept
out, JSON state, determinism, and fronts found on the toy space whose true front is known by enumeration."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from nas.core.objectives import hypervolume, nondominated
from nas.core.types import FailureKind, Outcome, Result
from nas.search_spaces.toy import ToySpace, toy_score
from nas.strategies.evolution import RegularizedEvolution
from nas.strategies.random import RandomSearch

REFERENCE = (-60.0, -21.0)  # worse than every architecture in both objectives


def two_scores(arch) -> list[float]:
    """Accuracy-like (toy_score, max 0) against size-like (the sum of the options, minimised)."""
    return [toy_score(arch), -float(sum(arch.values()))]


def result(trial, scores):
    return Result(trial.trial_id, Outcome.COMPLETE, score=scores[0], scores=list(scores))


def true_front() -> np.ndarray:
    space = ToySpace()
    names = list(space.decisions)
    points = np.array([two_scores(dict(zip(names, combo))) for combo in itertools.product(
        *space.decisions.values())])
    return points[nondominated(points)]


def run(strategy, budget: int) -> np.ndarray:
    points = []
    for _ in range(budget):
        t = strategy.ask()
        s = two_scores(t.arch)
        strategy.tell(t, result(t, s))
        points.append(s)
    return np.array(points)


def test_the_tournament_takes_the_lowest_rank_then_the_largest_crowding():
    evo = RegularizedEvolution(ToySpace(), objectives=["acc:max", "size:min"], population=5, sample_size=5, seed=0)
    # front: (0,4) (2,2) (3,1) (4,0); dominated: (1,1)
    for s in ([0.0, 4.0], [2.0, 2.0], [1.0, 1.0], [3.0, 1.0], [4.0, 0.0]):
        t = evo.ask()
        evo.tell(t, result(t, s))
    ids = [m.trial_id for m in evo.population]
    assert evo._crowded_tournament([2, 1]).trial_id == ids[1]  # rank 0 beats rank 1
    assert evo._crowded_tournament([1, 3]).trial_id == ids[1]  # same rank: (2,2) is less crowded than (3,1)
    assert evo._crowded_tournament([3, 0]).trial_id == ids[0]  # a boundary point: infinite crowding
    assert evo._crowded_tournament([0, 4]).trial_id == ids[0]  # both infinite: the first picked


def test_every_result_joins_and_the_oldest_dies_however_good():
    evo = RegularizedEvolution(ToySpace(), objectives=["a", "b"], population=3, sample_size=2, seed=1)
    trials = [evo.ask() for _ in range(4)]
    evo.tell(trials[0], result(trials[0], [10.0, 10.0]))  # dominates everything that follows
    for t in trials[1:]:
        evo.tell(t, result(t, [0.0, 0.0]))
    assert [m.trial_id for m in evo.population] == [t.trial_id for t in trials[1:]]
    assert all(m.scores == [0.0, 0.0] for m in evo.population)


def test_failed_and_infeasible_trials_never_join():
    evo = RegularizedEvolution(ToySpace(), objectives=["a", "b:min"], population=4, sample_size=2, seed=0)
    a, b, c = evo.ask(), evo.ask(), evo.ask()
    evo.tell(a, Result.failed(a.trial_id, "params 9e6 > 1e6", failure=FailureKind.INFEASIBLE))
    evo.tell(b, Result.failed(b.trial_id, "boom"))
    evo.tell(c, result(c, [1.0, -2.0]))
    assert [m.trial_id for m in evo.population] == [c.trial_id]


def test_scores_of_the_wrong_length_are_refused_with_one_line():
    evo = RegularizedEvolution(ToySpace(), objectives=["a", "b", "c"], population=4, sample_size=2, seed=0)
    t = evo.ask()
    with pytest.raises(ValueError, match="trial 0's result has 2 scores; this evolution ranks 3 objectives"):
        evo.tell(t, result(t, [1.0, 2.0]))
    with pytest.raises(ValueError, match="objective 'a' is given twice"):
        RegularizedEvolution(ToySpace(), objectives=["a", "a:min"])


def test_objectives_are_inferred_from_the_results_scores():
    evo = RegularizedEvolution(ToySpace(), population=4, sample_size=2, seed=0)
    run(evo, 10)
    assert all(m.scores is not None and len(m.scores) == 2 for m in evo.population)
    single = RegularizedEvolution(ToySpace(), objectives=["val_acc"], population=4, sample_size=2, seed=0)
    t = single.ask()
    single.tell(t, result(t, [0.5]))
    assert single.population[0].scores is None and "scores" not in single.state_dict()["population"][0]


def test_state_is_json_data_and_a_restored_strategy_asks_the_same():
    a = RegularizedEvolution(ToySpace(), objectives=["a", "b:min"], population=8, sample_size=3, seed=3)
    run(a, 20)
    state = json.loads(json.dumps(a.state_dict()))
    b = RegularizedEvolution(ToySpace(), objectives=["a", "b:min"], population=8, sample_size=3, seed=99)
    b.load_state_dict(state)
    assert [m.scores for m in b.population] == [m.scores for m in a.population]
    assert run(a, 15).tolist() == run(b, 15).tolist()


def test_same_seed_same_asks():
    make = lambda: RegularizedEvolution(ToySpace(), objectives=["a", "b"], population=10, sample_size=4, seed=7)  # noqa: E731
    assert run(make(), 60).tolist() == run(make(), 60).tolist()


def test_it_finds_more_of_the_known_front_than_random_search():
    """Hypervolume after 300 trials, 5 seeds each, against the true front's (enumerated, 3,125 archs)."""
    best = hypervolume(true_front(), REFERENCE)
    evo, rnd = [], []
    for seed in range(5):
        for strategy, out in ((RegularizedEvolution(ToySpace(), objectives=["a", "b"], population=20,
                                                    sample_size=5, seed=seed), evo),
                              (RandomSearch(ToySpace(), seed=seed), rnd)):
            points = run(strategy, 300)
            out.append(hypervolume(points[nondominated(points)], REFERENCE) / best)
    assert np.mean(evo) > np.mean(rnd) and min(evo) > 0.95, (evo, rnd)
