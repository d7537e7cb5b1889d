"""`nas best RUN_DIR --pareto [--export DIR]` on a real (small, in-process, really trained) run whose
run.json names two objectives: validation accuracy against the measured parameter count."""

from __future__ import annotations

import json

import pytest
import torch

import nas
from nas.cli import main
from nas.search_spaces.toy import ToySpace
from nas.trainer import TrainSettings

OBJ = ["val_acc:max", "params:min"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("pareto") / "run"
    nas.search(ToySpace(), "random", budget=8, executor="inprocess", seed=0, run_dir=path,
               settings=TrainSettings(epochs=1, batch_size=128, seed=0))
    cfg = json.loads((path / "run.json").read_text())
    (path / "run.json").write_text(json.dumps({**cfg, "objectives": OBJ}))  # as a multi-objective run writes it
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
    (bad / "run.json").write_text(json.dumps({**cfg, "objectives": ["val_acc", "val_acc:min"]}))
    assert main(["best", str(bad), "--pareto"]) == 2
    assert "objective 'val_acc' is given twice" in capsys.readouterr().err
