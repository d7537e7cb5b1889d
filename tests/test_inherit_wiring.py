"""Weight inheritance and warm starts in the search path: the runner copies the parent's tensors, the
executors hand the parent's checkpoint over, nas.search tells the strategy earlier runs' trials."""

from __future__ import annotations

import json

import pytest

import nas
from nas.monitor.status import run_status
from nas.search_spaces.macro import MacroSpace
from nas.search_spaces.toy import ToySpace
from nas.train.settings import TrainSettings

SETTINGS = TrainSettings(epochs=1, device="cpu", threads=1, measure_costs=False, seed=0)


def test_evolved_children_inherit_their_parents_weights(tmp_path):
    df = nas.search(MacroSpace(), "evolution", budget=10, executor="inprocess", seed=0, settings=SETTINGS,
                    strategy_options={"population": 4, "sample_size": 2, "inherit": True},
                    run_dir=tmp_path / "run")
    children = df[df.parent.notna()]
    assert len(children) == 6 and (children.state == "COMPLETE").all()
    for _, row in children.iterrows():
        m = row.metrics
        assert m["inherited_from"] == row.parent and 0 < m["inherited_params"] <= m["params"]
        assert 0.0 < m["inherited_fraction"] <= 1.0
    assert df[df.parent.isna()].metrics.map(lambda m: "inherited_params" not in m).all()
    records = [json.loads(line) for line in (tmp_path / "run" / "trials.jsonl").read_text().splitlines()]
    journaled = {r["trial"]["trial_id"]: r["trial"]["inherit_from"] for r in records if r["kind"] == "submit"}
    assert all(journaled[t] == p for t, p in zip(children.trial_id, children.parent, strict=True))


def test_a_warm_start_tells_the_strategy_earlier_trials_without_rerunning_them(tmp_path):
    first = nas.search(ToySpace(), "random", budget=6, executor="inprocess", seed=0, settings=SETTINGS,
                       run_dir=tmp_path / "a")
    df = nas.search(ToySpace(), "evolution", budget=4, executor="inprocess", seed=1, settings=SETTINGS,
                    strategy_options={"population": 4, "sample_size": 2}, warm_start=[tmp_path / "a"],
                    run_dir=tmp_path / "b")
    warm, own = df[df.trial_id < 0], df[df.trial_id >= 0]
    assert len(warm) == (first.state == "COMPLETE").sum() and len(own) == 4
    assert set(warm.metrics.map(lambda m: m["warm_start_run"])) == {str(tmp_path / "a")}
    assert sorted(warm.metrics.map(lambda m: m["warm_start_trial"])) == sorted(first.trial_id)
    assert own.parent.notna().all()  # the population was full from the start: every ask is a child
    assert json.loads((tmp_path / "b" / "run.json").read_text())["search"]["warm_start"] == [str(tmp_path / "a")]


def test_a_warm_start_from_another_space_is_refused_before_anything_runs(tmp_path):
    nas.search(ToySpace(), "random", budget=2, executor="inprocess", seed=0, settings=SETTINGS,
               run_dir=tmp_path / "a")
    with pytest.raises(ValueError, match=r"^warm-start run '.*/a': searched space .* this search .* a warm start "
                                         r"needs the same space$"):
        nas.search(MacroSpace(), "random", budget=2, executor="inprocess", seed=0, settings=SETTINGS,
                   warm_start=[tmp_path / "a"], run_dir=tmp_path / "b")
    assert not (tmp_path / "b").exists()


def test_nas_results_shows_where_warm_trials_came_from(tmp_path, capsys):
    from nas.cli import main

    nas.search(ToySpace(), "random", budget=3, executor="inprocess", seed=0, settings=SETTINGS,
               run_dir=tmp_path / "a")
    nas.search(ToySpace(), "random", budget=2, executor="inprocess", seed=1, settings=SETTINGS,
               warm_start=[tmp_path / "a"], run_dir=tmp_path / "b")
    assert main(["results", str(tmp_path / "b"), "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    warm = [r for r in rows if r["trial_id"] < 0]
    assert len(rows) == 5 and len(warm) == 3
    assert all(r["metrics"]["warm_start_run"] == str(tmp_path / "a") for r in warm)  # (nested, not a string)
    assert run_status(tmp_path / "b")["finished"] == 2  # the run's own trials; the warm ones are not its
