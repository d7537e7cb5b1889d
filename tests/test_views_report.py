"""Views that know the search: a scheduler run's rung view and best-so-far at the highest fidelity, stopped-early
counts in `nas status`, and objectives shown by name in their own units and direction (a minimised metric not
negated) in `nas status`, `nas results` and `nas best`."""

from __future__ import annotations

import json

import pytest

import nas
from nas.cli import main
from nas.monitor.page import write_report
from nas.monitor.rungs import rung_table
from nas.search_spaces.toy import ToySpace, toy_score


def three_epochs(ctx):
    """Later trials look worse at epoch 1 (so ASHA stops some there); a 'latency' that grows with d0."""
    for epoch in (1, 2, 3):
        value = 1.0 / (1 + ctx.trial.trial_id) if epoch == 1 else toy_score(ctx.trial.arch)
        if ctx.report(epoch=epoch, val_acc=value, latency_ms=1.0 + ctx.trial.arch["d0"]):
            return


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("views")
    nas.search(ToySpace(), "random", budget=12, executor="inprocess", seed=0, data=None, train=three_epochs,
               run_dir=root / "asha", scheduler="asha", epochs=3)
    nas.search(ToySpace(), "random", budget=8, executor="inprocess", seed=0, data=None, train=three_epochs,
               run_dir=root / "mo", objectives=["val_acc:max", "latency_ms:min"], epochs=3)
    return root


def test_rung_view_and_best_at_the_highest_fidelity(runs, tmp_path, capsys):
    df = nas.load_results(runs / "asha")
    stopped = int(df.outcome.isin(["STOPPED", "PAUSED"]).sum())
    assert stopped > 0
    table = rung_table(df)
    assert table["rung (epochs)"].iloc[-1] == 3 and table.reached.iloc[0] == len(df)
    assert table["stopped here"].sum() == stopped
    assert (table.reached.iloc[:-1].to_numpy() == (table["stopped here"] + table.promoted).iloc[:-1].to_numpy()).all()
    page = write_report(runs / "asha", tmp_path / "r.html").read_text()
    assert "<h3>Trials per rung</h3>" in page and "Best so far at the highest fidelity" in page
    assert f"{stopped} stopped early by the asha scheduler" in page
    assert main(["status", str(runs / "asha")]) == 0
    assert f"({stopped} stopped early)" in capsys.readouterr().out


def test_objectives_by_name_in_their_own_units(runs, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    assert main(["status", str(runs / "mo")]) == 0
    out = capsys.readouterr().out
    assert "best      val_acc " in out and "front " in out
    assert main(["results", str(runs / "mo")]) == 0
    header = capsys.readouterr().out.splitlines()[0].split()
    assert header[:3] == ["trial", "val_acc", "latency_ms"]
    assert main(["results", str(runs / "mo"), "--format", "json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert all(r["latency_ms"] >= 1.0 for r in records if r["state"] == "COMPLETE")  # not negated
    assert main(["best", str(runs / "mo")]) == 0
    block = capsys.readouterr().out
    assert "latency_ms" in block and "(min)" in block and "-1" not in block.split("latency_ms")[1][:12]


def test_the_live_line_of_a_multi_objective_run_shows_its_front(tmp_path):
    import io

    from nas.monitor.progress import SearchProgress

    stream = io.StringIO()
    df = nas.search(ToySpace(), "random", budget=6, executor="inprocess", seed=0, data=None, train=three_epochs,
                    run_dir=tmp_path / "mo", objectives=["val_acc:max", "latency_ms:min"], epochs=3,
                    callbacks=[SearchProgress(stream)])
    front = len(nas.pareto_front(df, ["val_acc:max", "latency_ms:min"]))
    assert f"front {front}, HV " in stream.getvalue().splitlines()[-1]


def test_the_report_of_a_multi_objective_run_has_views_per_objective(runs, tmp_path):
    page = write_report(runs / "mo", tmp_path / "mo.html").read_text()
    assert "<h3>Decisions against val_acc, latency_ms</h3>" in page
    assert "<h3>Decision importance for val_acc</h3>" in page and "<h3>Decision importance for latency_ms</h3>" in page
    assert "objectives val_acc:max, latency_ms:min" in page
