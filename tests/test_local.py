"""Local search (White, Nolen & Savani 2021) step by step on the toy space: neighbours from dims(), first and best
improvement, waiting on the last neighbours in flight, restarts at a local optimum, fidelities compared like with
like, a proxy warm-up's start order and a bounded memory (no Ray)."""

from __future__ import annotations

import pytest
from conftest import toy_search

from nas.core.types import Outcome, Result, Trial
from nas.run.snapshot import read_snapshot, write_snapshot
from nas.search_spaces.toy import TOY_OPTIMUM, ToySpace, toy_score
from nas.strategies.local import LocalSearch, neighbours
from nas.strategies.random import RandomSearch
from nas.strategies.warmup import warm_up


def done(trial, score, epoch=1, outcome=Outcome.COMPLETE):
    return Result(trial.trial_id, outcome, score=score, epoch=epoch)


def diff(a, b):
    return sum(a[k] != b[k] for k in a)


def test_neighbours_are_every_one_decision_change():
    arch = {"d0": 0, "d1": 4, "d2": 2, "d3": 2, "d4": 2}
    ns = neighbours(ToySpace(), arch)
    assert len(ns) == 5 * 4 and all(diff(arch, n) == 1 for n in ns)
    assert len({tuple(sorted(n.items())) for n in ns}) == 20


def test_first_improvement_moves_at_once_and_hands_out_the_new_neighbourhood():
    ls = LocalSearch(ToySpace(), seed=0, init=1)
    start = ls.ask()
    ls.tell(start, done(start, 0.0))
    assert ls.incumbent == start.arch and len(ls.queue) == 20
    worse = ls.ask()
    assert diff(worse.arch, start.arch) == 1
    ls.tell(worse, done(worse, -1.0))
    assert ls.incumbent == start.arch
    better = ls.ask()
    ls.tell(better, done(better, 1.0))
    assert ls.incumbent == better.arch
    nxt = ls.ask()
    assert diff(nxt.arch, better.arch) == 1 and nxt.arch not in (start.arch, worse.arch)  # remembered: not asked


def test_best_improvement_evaluates_the_whole_neighbourhood_before_moving():
    ls = LocalSearch(ToySpace(), seed=0, init=1, move="best")
    start = ls.ask()
    ls.tell(start, done(start, 0.0))
    trials = [ls.ask() for _ in range(20)]
    assert ls.ask() is None  # every neighbour handed out: the results decide
    for i, t in enumerate(trials):
        ls.tell(t, done(t, float(i)))
        assert ls.incumbent == start.arch
    nxt = ls.ask()
    assert ls.incumbent == trials[-1].arch and diff(nxt.arch, trials[-1].arch) == 1


def test_a_local_optimum_restarts_and_the_last_neighbours_in_flight_are_awaited():
    ls = LocalSearch(ToySpace(), seed=1, init=1)
    start = ls.ask()
    ls.tell(start, done(start, 5.0))
    out = [ls.ask() for _ in range(20)]
    assert ls.ask() is None and ls.restarts == 0
    for t in out:
        ls.tell(t, done(t, 0.0))
    fresh = ls.ask()
    assert ls.restarts == 1 and ls.incumbent is None and fresh.trial_id == 21


def test_init_starts_from_the_best_of_several_cells():
    ls = LocalSearch(ToySpace(), seed=0, init=3)
    starts = [ls.ask() for _ in range(3)]
    assert ls.ask() is None  # the start's cells are in flight
    for t, s in zip(starts, [1.0, 3.0, 2.0]):
        ls.tell(t, done(t, s))
    assert ls.incumbent == starts[1].arch


def test_failed_neighbours_are_not_asked_again_and_never_become_the_incumbent():
    ls = LocalSearch(ToySpace(), seed=0, init=1)
    start = ls.ask()
    ls.tell(start, done(start, 0.0))
    bad = ls.ask()
    ls.tell(bad, Result.failed(bad.trial_id, "boom"))
    assert ls.incumbent == start.arch
    assert all(ls.ask().arch != bad.arch for _ in range(19))


def test_a_promoted_result_is_compared_like_with_like():
    ls = LocalSearch(ToySpace(), seed=0, init=1)
    start = ls.ask()
    ls.tell(start, done(start, 0.70, epoch=12, outcome=Outcome.PAUSED))
    a = ls.ask()
    ls.tell(a, done(a, 0.69, epoch=12, outcome=Outcome.PAUSED))  # worse at 12 epochs
    ls.update(a, done(a, 0.90, epoch=200))  # 200 epochs: higher, but the incumbent has no 200-epoch score
    assert ls.incumbent == start.arch
    ls.update(start, done(start, 0.88, epoch=200))
    assert ls.incumbent_scores == {12: 0.70, 200: 0.88}
    b = ls.ask()
    ls.tell(b, done(b, 0.71, epoch=12, outcome=Outcome.PAUSED))
    assert ls.incumbent == b.arch  # like with like: 0.71 > 0.70 at 12 epochs


def test_the_warm_up_starts_from_the_proxys_best_in_order():
    ls = LocalSearch(ToySpace(), seed=0, init=2, warmup="params:40:3")
    with pytest.raises(ValueError, match="needs its 40 candidates scored before the first ask"):
        ls.ask()
    assert warm_up(ls, lambda archs: [toy_score(a) for a in archs])
    ranked = list(ls.warmup_pool.ranked)
    assert [toy_score(a) for a in ranked] == sorted((toy_score(a) for a in ranked), reverse=True)
    first = [ls.ask(), ls.ask()]
    assert [t.arch for t in first] == ranked[:2]


def test_it_finds_the_toy_optimum_before_random_search_on_the_same_budget():
    assert toy_search(LocalSearch(ToySpace(), seed=0, init=1), 60, in_flight=4) == 0.0
    assert toy_search(RandomSearch(ToySpace(), seed=0), 60, in_flight=4) < 0.0


def test_memory_is_bounded_and_a_snapshot_restores_the_climb(tmp_path):
    ls = LocalSearch(ToySpace(), seed=0, init=1, memory=30)
    for _ in range(200):
        t = ls.ask()
        ls.tell(t, done(t, toy_score(t.arch)))
    assert len(ls.memory) == 30
    write_snapshot(tmp_path / "s.json", ls.state_dict())
    back = LocalSearch(ToySpace(), seed=5, init=1, memory=30)
    back.load_state_dict(read_snapshot(tmp_path / "s.json"))
    for _ in range(20):
        a, b = ls.ask(), back.ask()
        assert a.to_dict() == b.to_dict()
        ls.tell(a, done(a, toy_score(a.arch)))
        back.tell(b, done(b, toy_score(b.arch)))


@pytest.mark.parametrize("options, message", [({"move": "steepest"}, "move must be 'first' or 'best'"),
                                              ({"init": 0}, "init must be an integer >= 1"),
                                              ({"warmup": "synflow:10:20"}, "warmup needs 1 <= K <= M"),
                                              ({"warmup": "flops:10:2"}, "warmup proxy must be one of")])
def test_bad_options_are_one_line_errors(options, message):
    with pytest.raises(ValueError, match=message):
        LocalSearch(ToySpace(), **options)


def test_a_warm_start_at_the_optimum_climbs_no_further_and_restarts():
    ls = LocalSearch(ToySpace(), seed=0, init=1)
    ls.warm_start(Trial(-1, TOY_OPTIMUM), Result(-1, Outcome.COMPLETE, score=0.0, epoch=1))
    assert ls.incumbent == TOY_OPTIMUM and ls.asked == 0
    for _ in range(20):
        t = ls.ask()
        ls.tell(t, done(t, toy_score(t.arch)))
        assert ls.incumbent == TOY_OPTIMUM
    assert ls.ask() is not None and ls.restarts == 1


@pytest.mark.parametrize("move", ["first", "best"])
def test_every_restart_on_the_toy_space_is_at_its_optimum(move):
    # (a better neighbour an earlier climb had evaluated was never compared with the incumbent: the climb took the
    # incumbent for a local optimum and restarted, at cells two steps from the optimum) the toy space is separable
    # and convex, so its optimum is its only local optimum: every restart must happen there
    for seed in range(3):
        ls = LocalSearch(ToySpace(), init=1, seed=seed, move=move)
        left = []
        for _ in range(600):
            incumbent, restarts = ls.incumbent, ls.restarts
            t = ls.ask()
            if ls.restarts > restarts:
                left.append(incumbent)
            ls.tell(t, done(t, toy_score(t.arch)))
        assert len(left) >= 5 and all(a == TOY_OPTIMUM for a in left), (seed, [toy_score(a) for a in left])



@pytest.mark.parametrize(("move", "seed"), [("first", 1), ("best", 31)])
def test_remembered_scores_of_several_fidelities_never_walk_in_a_circle(move, seed):
    """(Scores at 12 and 200 epochs compare at the highest fidelity both have, which is not transitive: moving to the
    best remembered better neighbour again and again went round A < B < C < A for ever, the driver spinning in
    tell, no trial asked again; with move="best" round ask, to a RecursionError.)"""
    import random
    import threading

    rng = random.Random(seed)
    ls = LocalSearch(ToySpace(), seed=seed, init=3, move=move)
    told = []

    def search():
        for _ in range(300):
            t = ls.ask()
            if t is None:
                continue
            ls.tell(t, Result(t.trial_id, Outcome.STOPPED, score=rng.random(), epoch=12))
            told.append(t)
            if rng.random() < 0.4:  # a promotion's longer result (ASHA, Hyperband)
                old = rng.choice(told)
                ls.update(old, Result(old.trial_id, Outcome.COMPLETE, score=rng.random(), epoch=200))

    failed = []

    def guarded():
        try:
            search()
        except RecursionError as e:  # (move="best" went round in ask)
            failed.append(e)

    worker = threading.Thread(target=guarded, daemon=True)  # (a circle would spin for ever: fail, do not hang)
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive() and not failed and len(told) > 150 and ls.restarts > 0
