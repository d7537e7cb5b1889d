"""Each scheduler's algorithm on known answers: ASHA stopping and promotion (Li et al. 2020), Hyperband's
brackets (Li et al. 2018) and the median stopping rule (Golovin et al. 2017), against hand-worked
examples and brute-force references. Deterministic, no Ray."""

from __future__ import annotations

import numpy as np
import pytest

from nas.core.scheduler import Phase, Promotion
from nas.core.types import Decision
from nas.schedulers.asha import ASHA, rung_levels
from nas.schedulers.hyperband import Hyperband, bracket_sizes
from nas.schedulers.median import MedianStopping

C, S, P = Decision.CONTINUE, Decision.STOP, Decision.PAUSE


# -- ASHA ---------------------------------------------------------------------------------------
def test_rungs():
    assert rung_levels(27, 1, 3) == (1, 3, 9, 27)
    assert rung_levels(200, 12, 3) == (12, 36, 108, 200)
    assert rung_levels(12, 12, 3) == (12,)
    assert ASHA(max_epochs=100, grace_period=4, eta=2).rungs == (4, 8, 16, 32, 64, 100)



def report(s, t, epoch, v):
    """``s.on_report``; a PAUSE ends that run, as the loop's paused trials do (then it is promotable)."""
    d = s.on_report(t, epoch, v)
    if d is P:
        s.on_result(t, epoch, v)
    return d

def test_asha_stopping_keeps_the_top_third_of_what_each_rung_has_seen():
    s = ASHA(max_epochs=27)
    scores = [5, 1, 2, 8, 3, 4, 9, 0, 7]
    # n results at the rung, rank r: continue iff r * 3 <= n or r == 1 (worked by hand)
    assert [report(s, t, 1, v) for t, v in enumerate(scores)] == [C, S, S, C, S, S, C, S, C]
    for epoch in (2, 3):  # the four survivors reach rung 3 in order 0, 3, 6, 8: 5, 8, 9, 7
        decisions = [report(s, t, epoch, scores[t]) for t in (0, 3, 6, 8)]
    assert decisions == [C, C, C, S]
    assert report(s, 1, 2, 10) is S  # stopped stays stopped


def test_asha_stopping_agrees_with_a_sorted_reference_on_random_sequences():
    rng = np.random.default_rng(0)
    for eta in (2, 3, 4):
        s = ASHA(max_epochs=64, eta=eta)
        seen: list[float] = []
        for t, v in enumerate(rng.normal(size=200).round(1)):  # rounded: ties happen
            seen.append(float(v))
            rank = 1 + sum(x > v for x in seen)
            expected = C if rank == 1 or rank * eta <= len(seen) else S
            assert report(s, t, 1, float(v)) is expected


def test_asha_promotion_order():
    s = ASHA(max_epochs=27, variant="promotion")
    assert s.pauses
    for t, v in enumerate([0.2, 0.5, 0.1]):
        assert report(s, t, 1, v) is P
    assert s.promote() == Promotion(1, 1, 3)  # best of three at rung 1
    assert s.promote() is None
    for t, v in zip((3, 4, 5), (0.4, 0.3, 0.05), strict=True):
        report(s, t, 1, v)
    assert s.promote() == Promotion(3, 1, 3)  # six results: the top two (1 and 3) may go up
    assert s.promote() is None
    for t, v in zip((6, 7, 8), (0.45, 0.35, 0.25), strict=True):
        report(s, t, 1, v)
    assert s.promote() == Promotion(6, 1, 3)  # nine: the top three 1, 6, 3
    for t, v in ((1, 0.7), (3, 0.55), (6, 0.9)):
        assert report(s, t, 2, v) is C and report(s, t, 3, v) is P
    report(s, 9, 1, 0.48)  # ten at rung 1: 9 is second best, so promotable there
    # rung 3 holds 1 (0.7), 3 (0.55), 6 (0.9): its best goes before rung 1's candidate
    assert s.promote() == Promotion(6, 3, 9)
    assert s.promote() == Promotion(9, 1, 3)
    assert s.promote() is None
    assert s.rung_result(6) == (3, 0.9) and s.rung_result(2) == (1, 0.1) and s.rung_result(99) is None
    assert report(s, 6, 4, 0.9) is C and report(s, 6, 9, 0.95) is P


def test_asha_promotion_agrees_with_a_brute_force_reference():
    """The definition written plainly (O(n) per rank), against the scheduler's sorted bookkeeping."""
    rng = np.random.default_rng(3)
    s = ASHA(max_epochs=27, variant="promotion")
    levels = s.rungs
    recorded: list[dict[int, list]] = [{} for _ in levels]  # trial -> [score, promoted]
    state: dict[int, str] = {}

    def reference():
        for k in range(len(levels) - 2, -1, -1):
            n = len(recorded[k])
            candidates = [(-v, t) for t, (v, p) in recorded[k].items() if not p and state[t] == "paused"
                          and (1 + sum(w > v for w, _ in recorded[k].values())) * 3 <= n]
            if candidates:
                t = min(candidates)[1]
                recorded[k][t][1] = True
                return Promotion(t, levels[k], levels[k + 1])
        return None

    def run_to_rung(t, start, k):
        for epoch in range(start + 1, levels[k] + 1):
            v = float(rng.integers(0, 50))  # ties happen
            d = report(s, t, epoch, v)
            if epoch == levels[k]:
                assert d is (P if k < len(levels) - 1 else C)
                recorded[k][t] = [v, False]
                state[t] = "paused" if k < len(levels) - 1 else "done"
            else:
                assert d is C

    for t in range(300):
        state[t] = "running"
        run_to_rung(t, 0, 0)
        if rng.random() < 0.1:
            victim = int(rng.choice(sorted(state)))
            if state[victim] == "paused":
                s.on_failed(victim)
                state[victim] = "failed"
        while (expected := reference()) is not None:
            assert s.promote() == expected
            state[expected.trial_id] = "running"
            run_to_rung(expected.trial_id, expected.epoch, levels.index(expected.until))
        assert s.promote() is None
    assert sum(len(r) for r in recorded[1:]) > 50  # promotions happened, up to the top rung
    assert recorded[-1]


def top_epochs_in_random_order(trials: int, seed: int) -> int:
    """The most epochs any trial trains in an asynchronous promotion search of ``trials`` trials over 2 workers
    (ASHA, rungs 1, 3, 9), whose runs end in an order drawn from ``seed``; promotions go on past the budget
    until none is due, as the loop's do."""
    rng = np.random.default_rng(seed)
    scores = rng.permutation(trials).tolist()
    s = ASHA(max_epochs=9, variant="promotion")
    running: list[tuple[int, int, int]] = []  # (trial, from epoch, to epoch)
    started = top = 0
    while True:
        while len(running) < 2:
            promotion = s.promote()
            if promotion is not None:
                running.append((promotion.trial_id, promotion.epoch, promotion.until))
            elif started < trials:
                s.on_start(started)
                running.append((started, 0, 1))
                started += 1
            else:
                break
        if not running:
            return top
        t, start, until = running.pop(int(rng.integers(len(running))))  # any of the runs may end first
        for epoch in range(start + 1, until + 1):
            report(s, t, epoch, scores[t] + epoch)  # (a pause at a rung ends the run)
        if until == 9:
            s.on_result(t, until, scores[t] + until)
        top = max(top, until)


def test_asha_promotion_reaches_the_top_rung_in_any_order_from_nine_trials():
    """Why tests/test_reporting_ray.py runs 9 trials: with 9, once all reached rung 1 its top 3 are promoted,
    and the best of 3 at rung 3 goes on to 9, whatever the order; with 8 only some orders get there."""
    assert {top_epochs_in_random_order(9, seed) for seed in range(300)} == {9}
    assert {top_epochs_in_random_order(8, seed) for seed in range(300)} == {3, 9}


def test_asha_promotion_never_promotes_a_failed_or_running_trial():
    s = ASHA(max_epochs=9, variant="promotion")
    for t, v in enumerate([0.9, 0.5, 0.1]):
        report(s, t, 1, v)
    s.on_failed(0)
    assert s.promote() is None  # 0 was the only top-1/3 trial
    s.on_result(1, 1, 0.5)  # the paused run of trial 1 ends: it stays paused
    assert s.trials[1].phase is Phase.PAUSED


def test_a_trial_reaching_max_epochs_finishes_by_itself():
    for variant in ("stopping", "promotion"):
        s = ASHA(max_epochs=3, grace_period=3, variant=variant)
        assert s.rungs == (3,)
        assert [report(s, 0, e, 0.5) for e in (1, 2, 3)] == [C, C, C]
        s.on_result(0, 3, 0.6)
        assert s.trials[0].phase is Phase.DONE


# -- Hyperband ----------------------------------------------------------------------------------
def test_hyperband_brackets_and_their_distribution():
    assert bracket_sizes(4, 3) == [27, 12, 6, 4]  # JMLR 2018, Table 1 with R = 27 (s = 3, 2, 1, 0)
    assert bracket_sizes(5, 3) == [81, 34, 15, 8, 5]  # R = 81, eta = 3
    hb = Hyperband(max_epochs=27, seed=1)
    assert [b.levels for b in hb.brackets] == [(1, 3, 9, 27), (3, 9, 27), (9, 27), (27,)]
    n = 4900
    for t in range(n):
        hb.on_start(t)
    counts = np.bincount(list(hb.bracket_of.values()), minlength=4) / n
    assert np.allclose(counts, [27 / 49, 12 / 49, 6 / 49, 4 / 49], atol=0.02)


def test_hyperband_judges_a_trial_within_its_bracket_only():
    hb = Hyperband(max_epochs=27, seed=0)
    for t in range(40):
        hb.on_start(t)
    in_bracket = {b: [t for t in range(40) if hb.bracket_of[t] == b] for b in range(4)}
    first, second = in_bracket[0][:2]
    assert hb.on_report(first, 1, 0.9) is C and hb.on_report(second, 1, 0.1) is S
    lone = in_bracket[1][0]  # bracket 1 starts at rung 3: epoch 1 is no rung there
    assert hb.on_report(lone, 1, 0.0) is C and hb.on_report(lone, 2, 0.0) is C
    assert hb.on_report(lone, 3, 0.0) is C  # the first result at its rung 3
    full = in_bracket[3][0]  # bracket 3 has no rung below 27: never stopped
    assert all(hb.on_report(full, e, 0.0) is C for e in range(1, 28))


# -- median stopping ----------------------------------------------------------------------------
def test_median_rule_on_a_worked_example():
    s = MedianStopping(max_epochs=10, min_samples=3, grace_period=2)
    curves = {0: [0.2, 0.4, 0.6], 1: [0.3, 0.5, 0.7], 2: [0.1, 0.2, 0.3]}
    for t, c in curves.items():
        for e, v in enumerate(c, 1):
            assert report(s, t, e, v) is C
    # running means at epoch 2: 0.3, 0.4, 0.15 -> median 0.3
    assert report(s, 3, 1, 0.0) is C  # inside the grace period
    assert report(s, 3, 2, 0.29) is S  # best 0.29 < 0.3
    assert report(s, 4, 1, 0.31) is C and report(s, 4, 2, 0.0) is C  # best so far 0.31 >= median
    assert s.running_mean(0, 3) == pytest.approx(0.4) and s.running_mean(0, 4) is None


def test_median_rule_agrees_with_a_brute_force_reference():
    rng = np.random.default_rng(4)
    s = MedianStopping(max_epochs=20, min_samples=3, grace_period=2)
    curves: dict[int, list[tuple[int, float]]] = {}
    failed: set[int] = set()
    for t in range(60):
        curves[t] = []
        epoch = 0
        while epoch < 20:
            epoch += int(rng.integers(1, 3))  # some epochs skipped
            epoch = min(epoch, 20)
            v = float(rng.integers(0, 30)) / 10
            others = [float(np.mean([x for e, x in c if e <= epoch])) for u, c in curves.items()
                      if u != t and u not in failed and c and c[-1][0] >= epoch and c[0][0] <= epoch]
            best = max([x for _, x in curves[t]] + [v])
            stop = 2 <= epoch < 20 and len(others) >= 3 and best < float(np.median(others))
            curves[t].append((epoch, v))
            assert report(s, t, epoch, v) is (S if stop else C)
            if stop:
                break
            if rng.random() < 0.03:
                s.on_failed(t)
                failed.add(t)
                break


def test_median_rule_waits_for_min_samples_and_ignores_failed_trials():
    s = MedianStopping(max_epochs=10, min_samples=2)
    report(s, 0, 1, 0.9)
    assert report(s, 1, 1, 0.1) is C  # one other trial: too few
    s.on_failed(0)
    assert report(s, 2, 1, 0.0) is C  # trial 0 failed: only trial 1 counts
    assert report(s, 3, 1, 0.01) is S  # trials 1, 2 (0.1, 0.0): median 0.05
