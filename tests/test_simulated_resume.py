"""A simulated run resumed after a crash: its clock goes on from the journal's last time (so a time budget counts
the simulated time already spent and the times stay in order), and a trial a scheduler paused before the crash can
still be promoted (the fresh executor knew nothing of it: "the tabular benchmark answers only 12 or 200-epoch
training from scratch")."""

from __future__ import annotations

import json

import pytest

import nas
from nas.engine.interfaces import Callback


class Crash(BaseException):
    """Stands for the driver dying: nothing in the platform catches it."""


class CrashAfter(Callback):
    def __init__(self, results: int) -> None:
        self.left = results

    def on_result(self, status, trial, result):
        self.left -= 1
        if self.left == 0:
            raise Crash


def results(run_dir):
    lines = (json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines())
    return [r["result"] for r in lines if r["kind"] == "result"]


def search(run_dir, crash_after=None, **kw):
    return nas.search("nb201", "evolution", executor="simulated", seed=0, run_dir=run_dir, progress=False,
                      strategy_options={"population": 8, "sample_size": 3},
                      callbacks=[CrashAfter(crash_after)] if crash_after else [], **kw)


def test_a_promotion_of_a_trial_paused_before_the_crash_is_answered(tmp_path):
    """(The resume was refused: the run stayed at 12 of 40.) With one worker it ends as the uninterrupted run."""
    kw = dict(budget=40, workers=1, scheduler="asha", scheduler_options={"levels": [12, 200], "variant": "promotion"},
              settings=nas.TrainSettings(epochs=200))
    whole = search(tmp_path / "whole", **kw)
    with pytest.raises(Crash):
        search(tmp_path / "run", crash_after=14, **kw)
    assert any(r["outcome"] == "PAUSED" for r in results(tmp_path / "run"))
    resumed = search(tmp_path / "run", resume=True, **kw)
    columns = ["trial_id", "arch", "state", "score", "epochs"]
    assert resumed[columns].sort_values("trial_id").equals(whole[columns].sort_values("trial_id"))
    assert (resumed["epochs"] == 200).any()


def test_the_clock_goes_on_from_the_journal_and_the_time_budget_counts_it(tmp_path):
    """(The resumed clock started at 0 again: a fresh 1,000 simulated s on top of those spent, and times ran
    backwards.)"""
    kw = dict(budget=500, time_budget=1000, workers=4)
    with pytest.raises(Crash):
        search(tmp_path / "run", crash_after=10, **kw)
    before = results(tmp_path / "run")
    last = max(r["end_time"] for r in before)
    search(tmp_path / "run", resume=True, **kw)
    after = results(tmp_path / "run")[len(before):]
    assert after and min(r["start_time"] for r in after) >= last
    assert max(r["end_time"] for r in after) < 1000 + 250  # (the budget ends it; a trial still running may end it)
