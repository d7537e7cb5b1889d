"""Regularized evolution against Real et al. 2019, Algorithm 1, checked step by step (no Ray)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import toy_search

from nas.core.types import Outcome, Result
from nas.engine.inprocess import InProcessExecutor
from nas.engine.loop import SearchLoop
from nas.search_spaces.toy import TOY_OPTIMUM, ToySpace, toy_score
from nas.strategies.evolution import RegularizedEvolution
from nas.strategies.random import RandomSearch
from nas.train.simple import scored


def complete(trial, score):
    return Result(trial.trial_id, Outcome.COMPLETE, score=score)


def test_initial_population_is_random_then_children_are_one_mutation_of_a_member():
    evo = RegularizedEvolution(ToySpace(), population=5, sample_size=2, seed=0)
    first = [evo.ask() for _ in range(5)]
    assert all(t.parent is None for t in first)
    for t in first:
        evo.tell(t, complete(t, toy_score(t.arch)))
    by_id = {t.trial_id: t for t in first}
    for _ in range(20):
        child = evo.ask()
        assert child.parent in by_id
        parent = by_id[child.parent]
        assert sum(parent.arch[k] != child.arch[k] for k in child.arch) == 1
        evo.tell(child, complete(child, toy_score(child.arch)))
        by_id[child.trial_id] = child


def test_oldest_member_is_removed_not_the_worst():
    evo = RegularizedEvolution(ToySpace(), population=3, sample_size=2, seed=0)
    trials = [evo.ask() for _ in range(3)]
    scores = [100.0, -5.0, -6.0]  # the oldest is by far the best
    for t, s in zip(trials, scores):
        evo.tell(t, complete(t, s))
    assert [m.trial_id for m in evo.population] == [0, 1, 2]
    child = evo.ask()
    evo.tell(child, complete(child, -50.0))  # worse than everyone
    assert [m.trial_id for m in evo.population] == [1, 2, child.trial_id]  # trial 0 aged out
    child2 = evo.ask()
    evo.tell(child2, complete(child2, -60.0))
    assert [m.trial_id for m in evo.population] == [2, child.trial_id, child2.trial_id]


def test_tournament_takes_the_best_of_the_sample():
    evo = RegularizedEvolution(ToySpace(), population=4, sample_size=4, seed=1)
    trials = [evo.ask() for _ in range(4)]
    for t, s in zip(trials, [1.0, 9.0, 3.0, 2.0]):
        evo.tell(t, complete(t, s))
    assert {evo.ask().parent for _ in range(10)} == {trials[1].trial_id}  # S = P: always the best


def test_asks_beyond_the_population_use_what_has_finished():
    evo = RegularizedEvolution(ToySpace(), population=4, sample_size=2, seed=0)
    pending = [evo.ask() for _ in range(4)]
    evo.tell(pending[2], complete(pending[2], 1.0))
    child = evo.ask()  # three of the initial population still train: no barrier
    assert child.parent == pending[2].trial_id


def test_random_while_nothing_has_finished():
    evo = RegularizedEvolution(ToySpace(), population=2, sample_size=1, seed=0)
    assert all(evo.ask().parent is None for _ in range(6))


def test_failed_trials_never_become_parents():
    evo = RegularizedEvolution(ToySpace(), population=3, sample_size=3, seed=0)
    trials = [evo.ask() for _ in range(3)]
    evo.tell(trials[0], Result.failed(trials[0].trial_id, "boom"))
    evo.tell(trials[1], complete(trials[1], 1.0))
    evo.tell(trials[2], Result.failed(trials[2].trial_id, "NaN"))
    assert [m.trial_id for m in evo.population] == [trials[1].trial_id]
    assert [evo.ask().parent for _ in range(2)] == [None, None]  # random ones take the failed ones' places
    assert evo.ask().parent == trials[1].trial_id


class FirstTournament(RegularizedEvolution):
    """Evolution that notes how many members its first tournament ran on."""

    first_tournament: int | None = None

    def _tournament(self):
        if self.first_tournament is None:
            self.first_tournament = len(self.population)
        return super()._tournament()


def fails_on_small_d0(arch):
    if arch["d0"] < 3:  # three of the five options: about 60% of random cells fail
        raise RuntimeError(f"d0={arch['d0']} does not fit")
    return toy_score(arch)


@pytest.mark.parametrize("in_flight", [1, 4])
def test_the_first_tournament_runs_on_a_full_population_when_initial_trials_fail(in_flight):
    # (random for the first P asks, however many of them failed: the first tournament ran on the few that joined,
    # 4 of 10 here; Real et al. 2019 Alg. 1 fills the population with P evaluated members first)
    for seed in range(3):
        evo = FirstTournament(ToySpace(), population=10, sample_size=5, seed=seed)
        executor = InProcessExecutor(evo.space, None, train=scored(fails_on_small_d0), slots=in_flight)
        results = SearchLoop(evo, executor, budget=60).run()
        failed = sum(not r.ok for t, r in results if t.parent is None)
        # (no generation barrier: a tournament may start while in_flight - 1 random cells still train, and fail)
        assert failed >= 5 and evo.first_tournament >= 10 - (in_flight - 1), (seed, failed, evo.first_tournament)


@pytest.mark.parametrize(("options", "message"), [
    ({"population": 0}, "population must be an integer >= 1, got 0"),
    ({"sample_size": 0}, "sample_size must be an integer >= 1, got 0"),
    ({"population": 5, "sample_size": 6}, "sample_size must be <= population"),
    ({"population": 2.5}, "population must be an integer"),
])
def test_bad_options_are_named(options, message):
    with pytest.raises(ValueError, match=message):
        RegularizedEvolution(ToySpace(), **options)


def run(strategy, budget):
    return toy_search(strategy, budget)


def test_evolution_finds_the_known_optimum_and_beats_random():
    """Over 20 fixed seeds, 150 trials each in a 3,125-cell space with a unique optimum."""
    evo = [run(RegularizedEvolution(ToySpace(), population=20, sample_size=5, seed=s), 150) for s in range(20)]
    rnd = [run(RandomSearch(ToySpace(), seed=s), 150) for s in range(20)]
    assert np.mean(evo) > np.mean(rnd) + 1.0
    assert sum(b == 0.0 for b in evo) >= 10  # reaches TOY_OPTIMUM itself in most runs
    assert toy_score(TOY_OPTIMUM) == 0.0


def test_dedup_avoids_the_population_and_the_trials_in_flight_and_survives_a_snapshot(tmp_path):
    """With dedup a child is never an architecture of the living population or of a trial in flight (the
    space is large enough for 10 re-mutations to find another); the state behind it is those two, so a
    snapshot stays O(population + in flight) and a restored strategy dedups the same way."""
    from nas.core.types import arch_key
    from nas.run.snapshot import read_snapshot, write_snapshot

    evo = RegularizedEvolution(ToySpace(), population=20, sample_size=5, seed=0, dedup=True)
    pending = [evo.ask() for _ in range(8)]
    for i in range(300):
        t = pending.pop(0)
        evo.tell(t, complete(t, toy_score(t.arch)))
        taken = {arch_key(m.arch) for m in evo.population} | {arch_key(p.arch) for p in pending}
        child = evo.ask()
        assert arch_key(child.arch) not in taken
        pending.append(child)
        if i == 150:
            write_snapshot(tmp_path / "s.json", evo.state_dict())
            restored = RegularizedEvolution(ToySpace(), population=20, sample_size=5, seed=1, dedup=True)
            restored.load_state_dict(read_snapshot(tmp_path / "s.json"))
            assert restored._taken == evo._taken
    assert len(evo._taken) <= 20 + 8
