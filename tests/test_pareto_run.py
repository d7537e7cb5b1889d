"""`nas best RUN_DIR --pareto [--export DIR]` and `nas report`'s front section, on a real (small, in-process,
really trained) run whose run.json names two objectives: validation accuracy against the measured parameter
count."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

import nas
from nas.cli import main
from nas.core.front import hypervolume_over_time
from nas.core.types import FailureKind, Result, Trial
from nas.monitor.front_figures import front_scatter, hypervolume_figure
from nas.run.reader import results_frame
from nas.search_spaces.toy import ToySpace
from nas.train.settings import TrainSettings

OBJ = ["val_acc:max", "params:min"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("pareto") / "run"
    nas.search(ToySpace(), "random", budget=8, executor="inprocess", seed=0, run_dir=path,
               settings=TrainSettings(epochs=1, batch_size=128, seed=0))
    cfg = json.loads((path / "run.json").read_text())
    cfg["search"]["objectives"] = OBJ  # as a multi-objective run writes it
    (path / "run.json").write_text(json.dumps(cfg))
    return path


def test_the_front_is_listed_with_each_objective(run_dir, capsys):
    df = nas.load_results(run_dir)
    front = nas.pareto_front(df, OBJ)
    assert 1 <= len(front) < len(df)
    assert main(["best", str(run_dir), "--pareto"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split() == ["trial", "val_acc", "(max)", "params", "(min)", "architecture"]
    listed = [int(line.split()[0]) for line in lines[1:1 + len(front)]]
    assert listed == front.trial_id.tolist()
    assert f"Pareto front: {len(front)} trial" in out and "hypervolume" in out and "reference val_acc=" in out
    # every listed trial is undominated among the COMPLETE ones
    pts = [(m["val_acc"], m["params"]) for m in df.metrics]
    for t in listed:
        a, p = df.metrics[df.trial_id == t].iloc[0]["val_acc"], df.metrics[df.trial_id == t].iloc[0]["params"]
        assert not any(a2 >= a and p2 <= p and (a2, p2) != (a, p) for a2, p2 in pts)


def test_the_front_is_exported_with_the_kept_weights(run_dir, tmp_path, capsys):
    out = tmp_path / "export"
    assert main(["best", str(run_dir), "--pareto", "--export", str(out)]) == 0
    assert f"wrote {out / 'front.json'}" in capsys.readouterr().out
    doc = json.loads((out / "front.json").read_text())
    front = nas.pareto_front(nas.load_results(run_dir), OBJ)
    assert doc["objectives"] == OBJ and [m["trial_id"] for m in doc["members"]] == front.trial_id.tolist()
    assert doc["hypervolume"] > 0 and set(doc["reference"]) == {"val_acc", "params"}
    best = json.loads((run_dir / "best.json").read_text())["trial_id"]
    with_weights = [m for m in doc["members"] if m["weights"]]
    assert [m["trial_id"] for m in with_weights] == [best]  # the run kept only the best trial's weights
    state = torch.load(out / with_weights[0]["weights"], weights_only=True)
    assert "model" in state and all(set(m["arch"]) == {f"d{i}" for i in range(5)} for m in doc["members"])


def test_bad_input(run_dir, tmp_path, capsys):
    assert main(["best", str(run_dir), "--export", str(tmp_path / "x")]) == 2
    assert "--export DIR goes with --pareto" in capsys.readouterr().err
    cfg = json.loads((run_dir / "run.json").read_text())
    bad = tmp_path / "bad"
    bad.mkdir()
    cfg["search"]["objectives"] = ["val_acc", "val_acc:min"]
    (bad / "run.json").write_text(json.dumps(cfg))
    assert main(["best", str(bad), "--pareto"]) == 2
    assert "objective 'val_acc' is given twice" in capsys.readouterr().err


def test_report_shows_every_trial_the_front_highlighted_and_hypervolume_against_time(run_dir, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert main(["report", str(run_dir), "--out", str(out)]) == 0
    page = out.read_text()
    section = page[page.index("<h3>Pareto front and hypervolume</h3>"):]
    section = section[:section.index("<h3>", 5)]
    assert "Objectives: val_acc:max, params:min." in section
    assert "id=\"run0-front\"" in section and "id=\"run0-hypervolume\"" in section
    assert section.count("Plotly.newPlot") == 2
    df = nas.load_results(run_dir)
    fig = front_scatter(df, OBJ)
    every, front = fig.data
    assert sorted(every.customdata[:, 0]) == sorted(df.trial_id)
    assert sorted(front.customdata[:, 0]) == sorted(nas.pareto_front(df, OBJ).trial_id)
    assert fig.layout.xaxis.title.text == "params (lower is better)"
    hv = hypervolume_figure(df, OBJ)
    assert len(hv.data[0].y) == len(df) and (np.diff(hv.data[0].y) >= 0).all()
    assert hv.data[1].y[-1] == len(front.customdata) and hv.data[0].x[0] > 0  # seconds since the first start


def test_infeasible_trials_are_drawn_nowhere_on_the_front(run_dir):
    df = nas.load_results(run_dir)
    extra = results_frame([(Trial(99, {"d0": 0}), Result.failed(99, "params 9e9 > 1e6", failure=FailureKind.INFEASIBLE,
                                                                  metrics={"params": 1.0, "val_acc": 1.0}))])
    both = pd.concat([df, extra], ignore_index=True)
    fig = front_scatter(both, OBJ)
    assert 99 not in list(fig.data[0].customdata[:, 0]) and 99 not in list(fig.data[1].customdata[:, 0])
    assert "(1 FAILED or infeasible, never on it)" in fig.layout.title.text
    assert len(hypervolume_over_time(both, OBJ)) == len(df)


def test_status_has_a_front_line_for_several_objectives(run_dir, capsys):
    assert main(["status", str(run_dir)]) == 0
    out = capsys.readouterr().out
    n = len(nas.pareto_front(nas.load_results(run_dir), OBJ))
    assert f"front     {n} trials on the Pareto front of val_acc:max, params:min; hypervolume " in out


def test_trials_a_scheduler_stopped_early_are_left_off_the_front(tmp_path):
    """(ASHA's stopped cells sat on the front with their 12-epoch accuracy beside 200-epoch ones: two of its seven
    members here, its cheap end, and the hypervolume counted them.)"""
    df = nas.search("nb201", "random", budget=60, executor="simulated", workers=4, seed=0, epochs=200,
                    objectives=["val_acc", "latency_ms:min"], scheduler="asha",
                    scheduler_options={"levels": [12, 200]}, run_dir=tmp_path / "run", progress=False)
    front = nas.pareto_front(df, ["val_acc", "latency_ms:min"])
    assert len(front) >= 3 and (front.outcome == "COMPLETE").all() and (front.epochs == 200).all()
    assert (df.outcome == "STOPPED").sum() > 10  # (a stopped one would have been on the front)
    stopped = df[df.outcome == "STOPPED"].assign(
        latency_ms=lambda d: d.metrics.map(lambda m: m["latency_ms"]))
    assert (stopped.latency_ms < front.latency_ms.min()).any()
    assert df.attrs["front"].trial_id.tolist() == front.trial_id.tolist()


def test_a_run_none_of_whose_trials_trained_in_full_has_an_empty_front_as_the_live_one(tmp_path):
    """(The end-of-search summary and nas status showed a front of stopped trials while the progress bar and the
    metrics, which count trials trained in full, showed none.)"""
    from nas.monitor.status import format_summary, run_status

    df = nas.search("nb201", "random", budget=50, executor="simulated", workers=4, seed=0, epochs=200,
                    time_budget=400, objectives=["val_acc", "latency_ms:min"], scheduler="asha",
                    scheduler_options={"levels": [12, 200]}, run_dir=tmp_path / "run", progress=False)
    assert len(df) and (df.outcome != "COMPLETE").all()
    assert df.attrs["front"].empty and "hypervolume" not in format_summary(run_status(tmp_path / "run"))
