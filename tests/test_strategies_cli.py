"""Each new strategy runs a small real search through the CLI: Ray trainer actors, PyTorch on digits."""

from __future__ import annotations

import pytest

from nas.cli import main
from nas.run.reader import read_journal

pytestmark = pytest.mark.ray

BASE = ["search", "--space", "macro", "--workers", "2", "--epochs", "1", "--seed", "0", "--quiet"]


@pytest.mark.parametrize(("strategy", "options", "budget"), [
    ("rl", ["-o", "batch=2"], 4),
    ("optuna", ["-o", "startup=2"], 4),
    ("pbt", ["-o", "population=2", "-o", "quantile=0.5", "-o", 'hparams={"lr": {"low": 0.003, "high": 0.03}}'], 6),
])
def test_search_on_ray_actors(ray_local, tmp_path, capsys, strategy, options, budget):
    run_dir = tmp_path / strategy
    code = main([*BASE, "--strategy", strategy, "--budget", str(budget), "--run-dir", str(run_dir), *options])
    out = capsys.readouterr().out
    assert code == 0 and f"finished {budget} trials (0 failed)" in out and "best val_acc" in out
    records = list(read_journal(run_dir))
    assert len(records) == budget and all(r.ok and 0.0 <= r.score <= 1.0 for _, r in records)
    assert {t.strategy for t, _ in records} == {strategy}
    assert {r.worker for _, r in records} == {"nas-trainer-0", "nas-trainer-1"}
    assert (run_dir / "best.pt").stat().st_size > 0
    if strategy == "pbt":  # segments go on from checkpoints passed through Ray's object store (own or
        # a better member's: with quantile 0.5 the worse of the two members exploits the better)
        by_id = {t.trial_id: (t, r) for t, r in records}
        resumed = [(t, r) for t, r in records if t.checkpoint_from is not None]
        assert len(resumed) == budget - 2 and {t.member for t, _ in records} == {0, 1}
        for t, r in resumed:
            source = by_id[t.checkpoint_from][1]
            assert r.epoch == source.epoch + 1 and r.history[0]["epoch"] == source.epoch + 1
            assert t.arch == by_id[t.checkpoint_from][0].arch and 0.003 <= t.hparams["lr"] <= 0.03
