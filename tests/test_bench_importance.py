"""``nas bench importance``: the report's fANOVA forest against Optuna's default on made-up runs with planted
important decisions, and on a real run directory; figures printed side by side."""

from __future__ import annotations

import nas
from nas.cli import main
from nas_benchmarks import importance_cost as importance


def test_both_forests_find_the_planted_decisions_and_the_figures_are_printed():
    row = importance.measure(300, 8, choices=4, noise=0.05, seed=1)
    assert row["ours_top"] and row["default_top"]
    assert row["ours_s"] > 0 and row["default_s"] > 0 and row["same_top3"] and 0 <= row["max_diff"] < 1


def test_the_command_prints_a_row_per_made_up_run_and_per_run_directory(tmp_path, capsys):
    run = tmp_path / "run"
    nas.search("nb201", "random", budget=40, executor="simulated", seed=0, run_dir=run, progress=False)
    capsys.readouterr()
    assert main(["bench", "importance", "--sizes", "80x3,60x5", "--seeds", "2", "--run", str(run)]) == 0
    out = capsys.readouterr().out
    assert "default / ours" in out and out.count("80 trials x 3") == 2 and out.count("60 trials x 5") == 2
    assert f"{run} (40 COMPLETE x 6)" in out
