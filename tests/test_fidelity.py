"""Scores of several fidelities compared like with like (nas.strategies.fidelity), and evolution's use of them: the
tournament never weighs a 12-epoch score against a 200-epoch one, a promoted trial's longer result reaches its
member through ``update``, and a snapshot written before fidelities were kept still loads (no Ray)."""

from __future__ import annotations

from nas.core.types import Outcome, Result
from nas.run.snapshot import read_snapshot, write_snapshot
from nas.search_spaces.toy import ToySpace
from nas.strategies.evolution import RegularizedEvolution
from nas.strategies.fidelity import best_of, better, quantile, shared_fidelity


def test_comparisons_use_the_highest_shared_fidelity_else_ranks_within_each():
    assert shared_fidelity([{12: 0.8, 200: 0.9}, {12: 0.7}]) == 12
    assert shared_fidelity([{200: 0.9}, {12: 0.7}]) is None
    assert best_of([{12: 0.80, 200: 0.90}, {12: 0.85}]) == 1
    reference = [{200: 0.90}, {200: 0.95}, {12: 0.70}, {12: 0.60}, {12: 0.65}]
    assert quantile({200: 0.90}, reference) == 0.25 and quantile({12: 0.70}, reference) == 5 / 6
    assert best_of([{200: 0.90}, {12: 0.70}], reference) == 1  # the best at 12 beats the worse at 200
    assert not better({200: 0.90}, {12: 0.70}, reference) and better({200: 0.90}, {12: 0.70})


def paused(trial, score, epoch=12):
    return Result(trial.trial_id, Outcome.PAUSED, score=score, epoch=epoch)


def test_the_tournament_compares_members_at_their_shared_fidelity():
    evo = RegularizedEvolution(ToySpace(), population=2, sample_size=2, seed=0)
    a, b = evo.ask(), evo.ask()
    evo.tell(a, paused(a, 0.80))
    evo.tell(b, paused(b, 0.85))
    evo.update(a, Result(a.trial_id, Outcome.COMPLETE, score=0.93, epoch=200))  # a promoted: longer, higher
    assert [m.fidelities for m in evo.population] == [{12: 0.80, 200: 0.93}, {12: 0.85}]
    assert evo.population[0].score == 0.93
    assert {evo.ask().parent for _ in range(10)} == {b.trial_id}  # 0.85 > 0.80 at 12 epochs: like with like


def test_a_member_trained_only_at_the_top_fidelity_is_ranked_within_it():
    evo = RegularizedEvolution(ToySpace(), population=5, sample_size=5, seed=0)
    trials = [evo.ask() for _ in range(5)]
    evo.tell(trials[0], Result(trials[0].trial_id, Outcome.COMPLETE, score=0.90, epoch=200))  # Hyperband: 200 at once
    evo.tell(trials[1], Result(trials[1].trial_id, Outcome.COMPLETE, score=0.91, epoch=200))
    for t, score in zip(trials[2:], (0.84, 0.60, 0.70)):
        evo.tell(t, paused(t, score))
    # raw scores would pick 0.91 (3/4 of the way up its fidelity); 0.84 is 5/6 of the way up its own
    assert {evo.ask().parent for _ in range(5)} == {trials[2].trial_id}


def test_an_update_of_a_dead_member_or_a_failure_changes_nothing():
    evo = RegularizedEvolution(ToySpace(), population=1, sample_size=1, seed=0)
    a, b = evo.ask(), evo.ask()
    evo.tell(a, paused(a, 0.5))
    evo.tell(b, paused(b, 0.6))  # a ages out
    evo.update(a, Result(a.trial_id, Outcome.COMPLETE, score=0.99, epoch=200))
    evo.update(b, Result.failed(b.trial_id, "lost"))
    assert [(m.trial_id, m.fidelities) for m in evo.population] == [(b.trial_id, {12: 0.6})]


def test_a_snapshot_without_fidelities_still_loads(tmp_path):
    evo = RegularizedEvolution(ToySpace(), population=3, sample_size=2, seed=0)
    for _ in range(3):
        t = evo.ask()
        evo.tell(t, Result(t.trial_id, Outcome.COMPLETE, score=float(t.trial_id), epoch=3))
    state = evo.state_dict()
    for m in state["population"]:
        del m["fidelities"]  # as written before this change
    write_snapshot(tmp_path / "s.json", state)
    back = RegularizedEvolution(ToySpace(), population=3, sample_size=2, seed=1)
    back.load_state_dict(read_snapshot(tmp_path / "s.json"))
    assert [m.fidelities for m in back.population] == [{0: 0.0}, {0: 1.0}, {0: 2.0}]
    t = back.ask()
    back.tell(t, Result(t.trial_id, Outcome.COMPLETE, score=5.0, epoch=3))
    assert back.population[-1].fidelities == {3: 5.0} and back.ask().parent is not None
