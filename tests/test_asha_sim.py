"""``nas bench asha``: evolution with and without ASHA (rungs 12, 200) on the simulated NAS-Bench-201,
through the real search loop and scheduler (quick sizes)."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from nas.engine.tabular.nb201_table import load_table
from nas_benchmarks import asha_sim


@pytest.fixture(scope="module")
def quick():
    return asha_sim.compare(range(2), time_budget=10_000, workers=2)


def test_every_method_runs_and_asha_trains_fewer_cells_to_200_epochs(quick):
    summary, outcomes = quick
    assert [o.method for o in outcomes] == [m for m in asha_sim.METHODS for _ in range(2)]
    by = {m: [o for o in outcomes if o.method == m] for m in asha_sim.METHODS}
    for o in by["evolution 200"]:
        assert o.trials == o.full > 0
    for o in by["evolution 12"]:
        assert o.full == 0 and o.trials > 10 * by["evolution 200"][0].trials
    for m in ("ASHA stopping", "ASHA promotion", "HB promotion", "ASHA prom. (mixed)", "HB prom. (mixed)"):
        for o in by[m]:
            assert 0 < o.full < o.trials  # some went on to 200 epochs, the rest ended at the 12-epoch rung
    valid = load_table().valid200["cifar10"]
    for o in outcomes:
        longest = 1.06 * load_table().time200["cifar10"].max()  # a trial may end past the budget, once per worker
        assert o.work <= 2 * (10_000 + longest)
        assert o.curve and all(a[0] <= b[0] for a, b in zip(o.curve, o.curve[1:]))
        assert all(v in valid for _, v in o.curve) and o.curve[-1][0] <= 10_000
    rows = summary["rows"]
    assert summary["target"] == pytest.approx(rows["evolution 200"]["final"])
    assert rows["evolution 200"]["speedup"] == pytest.approx(1.0)
    table = asha_sim.format_table(summary, 10_000)
    assert all(m in table for m in asha_sim.METHODS) and f"time to {summary['target']:.2f}" in table


def test_same_seeds_same_outcomes(quick):
    again = asha_sim.run_method("ASHA promotion", 1, time_budget=10_000, workers=2)
    first = [o for o in quick[1] if o.method == "ASHA promotion" and o.seed == 1][0]
    assert again == first


def test_the_pick_is_the_best_at_the_highest_fidelity_reached():
    valid = np.array([90.0, 91.0, 89.0, 92.0])
    ended = [(5, 12, 0.80, 0), (6, 12, 0.85, 1), (7, 200, 0.88, 2), (8, 12, 0.95, 3), (20, 200, 0.99, 3)]
    assert asha_sim.pick_curve(ended, valid, 10) == [(5, 90.0), (6, 91.0), (7, 89.0)]
    assert asha_sim.pick_curve(ended, valid, 30)[-1] == (20, 92.0)
    grid = np.array([0.0, 5.0, 10.0])
    assert asha_sim.time_to_reach(grid, np.array([np.nan, 89.0, 91.0]), 90.5) == 10.0
    assert asha_sim.time_to_reach(grid, np.array([np.nan, 89.0, 90.0]), 90.5) == float("inf")


@pytest.mark.parametrize("argv, message", [(["--seeds", "0"], "--seeds must be >= 1, got 0"),
                                           (["--time-budget", "-5"],
                                            "--time-budget must be a finite number of simulated seconds > 0, got -5.0"),
                                           (["--eta", "1"], "eta must be a finite number > 1, got 1.0")])
def test_bad_arguments_are_one_line_errors(argv, message):
    parser = argparse.ArgumentParser()
    asha_sim.register(parser.add_subparsers())
    args = parser.parse_args(["asha", *argv])
    with pytest.raises(ValueError, match=message):
        args.handler(args)


def test_the_quick_command_prints_the_table(capsys):
    parser = argparse.ArgumentParser()
    asha_sim.register(parser.add_subparsers())
    args = parser.parse_args(["asha", "--quick", "--jobs", "1", "--workers", "2"])
    assert args.handler(args) == 0
    out = capsys.readouterr().out
    assert "3 seeds" in out and "HB promotion" in out and f"{3 * len(asha_sim.METHODS)} runs in" in out
    assert "median stopping: not run" in out and "p vs it" in out


def test_the_mixed_evolution_compares_raw_scores_and_ignores_promotions():
    from nas.core.types import Outcome, Result
    from nas.search_spaces.nb201 import NB201Space

    evo = asha_sim.MixedEvolution(NB201Space(), population=2, sample_size=2, seed=0)
    a, b = evo.ask(), evo.ask()
    evo.tell(a, Result(a.trial_id, Outcome.COMPLETE, score=0.90, epoch=200))
    evo.tell(b, Result(b.trial_id, Outcome.PAUSED, score=0.85, epoch=12))
    evo.update(b, Result(b.trial_id, Outcome.COMPLETE, score=0.95, epoch=200))
    assert [m.fidelities for m in evo.population] == [{200: 0.90}, {12: 0.85}]
    assert {evo.ask().parent for _ in range(5)} == {a.trial_id}  # 0.90 at 200 "beats" 0.85 at 12
