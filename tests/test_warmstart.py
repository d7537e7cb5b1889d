"""Warm starts from earlier run directories: checks, id remapping, every strategy, kept weights."""

from __future__ import annotations

import io
import json

import pytest
import torch
from conftest import toy_search

import nas
from nas.api import make_strategy
from nas.core.registry import strategies
from nas.core.types import Outcome, Result
from nas.run.reader import load_run, read_journal
from nas.run.snapshot import read_snapshot, write_snapshot
from nas.run.warmstart import kept_checkpoint, load_warm_start, tell_warm_start, warm_checkpoint
from nas.search_spaces.toy import ToySpace, toy_score
from nas.train.settings import TrainSettings
from nas.train.simple import scored

TOY = {"class": "toy", "args": {}}


def toy_run(path, strategy="evolution", budget=12, seed=0, **options):
    nas.search("toy", strategy, budget=budget, workers=1, executor="inprocess", seed=seed, run_dir=path,
               data=None, train=scored(toy_score), strategy_options=options or None)
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("warm")
    return (toy_run(base / "a", population=4, sample_size=2),
            toy_run(base / "b", strategy="random", budget=5, seed=1))


def test_finished_trials_come_back_with_negative_ids_and_their_origin(runs):
    a, b = runs
    warm = load_warm_start([a, b], space_spec=TOY, objectives=["val_acc"])
    assert [w.trial.trial_id for w in warm] == list(range(-1, -18, -1))
    assert all(w.result.trial_id == w.trial.trial_id and w.result.ok for w in warm)
    assert [w.run for w in warm] == [str(a)] * 12 + [str(b)] * 5
    first = warm[0]
    assert first.result.metrics["warm_start_run"] == str(a) and first.result.metrics["warm_start_trial"] == 0
    by_source = {(w.run, w.source_id): w.trial.trial_id for w in warm}
    children = [w for w in warm if w.trial.parent is not None]
    assert children and all(w.trial.parent < 0 for w in children)
    for trial, _ in read_journal(a):  # parent references follow the remap
        if trial.parent is not None:
            assert warm[-by_source[(str(a), trial.trial_id)] - 1].trial.parent == by_source[(str(a), trial.parent)]
    assert all(w.trial.member is None and w.trial.strategy == "random" for w in warm[12:])
    again = load_warm_start([a, b], space_spec=TOY, objectives="val_acc:max")
    assert [(w.trial, w.result.score) for w in again] == [(w.trial, w.result.score) for w in warm]  # stable ids


def test_failed_trials_are_not_carried_over(tmp_path):
    def flaky(arch):
        if arch["d0"] == 0:
            raise RuntimeError("boom")
        return toy_score(arch)

    path = tmp_path / "flaky"
    nas.search("toy", "random", budget=20, workers=1, executor="inprocess", run_dir=path,
               data=None, train=scored(flaky))
    _, df = load_run(path)
    warm = load_warm_start([path], space_spec=TOY)
    assert len(warm) == (df.state == "COMPLETE").sum() < 20
    assert all(w.trial.arch["d0"] != 0 for w in warm)


def test_other_space_other_objectives_and_bad_directories_are_named(runs, tmp_path):
    a, _ = runs
    with pytest.raises(ValueError, match=r"^warm-start run '.*a': searched space \{'args': \{\}, 'class': 'toy'\}, "
                                         r"this search \{'args': \{\}, 'class': 'nb201'\}; a warm start needs"):
        load_warm_start([a], space_spec={"class": "nb201", "args": {}})
    with pytest.raises(ValueError, match=r"optimised objectives \['val_acc:max'\], this search \['val_loss:min'\]"):
        load_warm_start([a], space_spec=TOY, objectives=["val_loss:min"])
    other = tmp_path / "other"
    toy_run(other, strategy="random", budget=2)
    cfg = json.loads((other / "run.json").read_text())
    cfg["search"]["objectives"] = ["val_acc:max", "params:min"]
    (other / "run.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"'.*other': optimised objectives \['val_acc:max', 'params:min'\], "
                                         r"this search \['val_acc:max'\]"):
        load_warm_start([other], space_spec=TOY)
    assert len(load_warm_start([other], space_spec=TOY, objectives=["val_acc", "params:min"])) == 2
    with pytest.raises(ValueError, match=r"warm-start run '.*nowhere' does not exist"):
        load_warm_start([tmp_path / "nowhere"], space_spec=TOY)
    with pytest.raises(ValueError, match=r"given twice"):
        load_warm_start([a, a], space_spec=TOY)
    corrupt = tmp_path / "corrupt"
    toy_run(corrupt, strategy="random", budget=3)
    lines = (corrupt / "trials.jsonl").read_text().splitlines(keepends=True)
    (corrupt / "trials.jsonl").write_text(lines[0] + "{not json\n" + "".join(lines[1:]))
    with pytest.raises(ValueError, match=r"^warm-start run '.*corrupt': .*trials.jsonl line 2 is not a journal"):
        load_warm_start([corrupt], space_spec=TOY)
    (corrupt / "run.json").write_text("{")
    with pytest.raises(ValueError, match=r"^warm-start run '.*corrupt': .*run.json is corrupt"):
        load_warm_start([corrupt], space_spec=TOY)


def drive(strategy, n):
    asked = []
    for i in range(n):
        t = strategy.ask()
        assert t is not None
        asked.append(t)
        strategy.tell(t, Result(t.trial_id, Outcome.COMPLETE, score=toy_score(t.arch) if i % 4 else None)
                      if i % 4 else Result.failed(t.trial_id, "boom"))
    return asked


@pytest.mark.parametrize("name", strategies.names())
def test_every_strategy_takes_a_warm_start_or_refuses_it_by_name(name, runs, tmp_path):
    warm = load_warm_start(runs, space_spec=TOY)
    options = {"population": 10, "sample_size": 3} if name == "evolution" else None
    strategy = make_strategy(name, ToySpace(), seed=0, options=options)
    if name == "pbt":
        with pytest.raises(ValueError, match="strategy 'pbt' cannot be warm-started"):
            tell_warm_start(strategy, warm)
        return
    assert tell_warm_start(strategy, warm) == len(warm)
    asked = drive(strategy, 12)
    assert [t.trial_id for t in asked] == list(range(12))  # its own ids: no collision with the warm ones
    with pytest.raises(ValueError, match=f"strategy '{name}' has already asked"):
        tell_warm_start(strategy, warm)
    write_snapshot(tmp_path / "snapshot.json", {"state": strategy.state_dict()})  # the state stays data
    clone = make_strategy(name, ToySpace(), seed=1, options=options)
    clone.load_state_dict(read_snapshot(tmp_path / "snapshot.json")["state"])
    assert clone.ask() == strategy.ask()  # a resumed run asks what this one would have
    if name == "optuna":
        assert len(strategy.study.trials) == len(warm) + 13
    if name == "rl":
        assert strategy.rewards_seen >= len(warm)
    if name == "random":
        warm_keys = {nas.core.types.arch_key(w.trial.arch) for w in warm}
        assert not warm_keys & {nas.core.types.arch_key(t.arch) for t in asked}  # not proposed again
    if name == "evolution":  # 17 warm trials fill its initial population of 10: the first ask is a child
        assert asked[0].parent is not None and asked[0].parent < 0


def test_evolution_children_of_warm_trials_inherit_from_their_negative_ids(runs):
    warm = load_warm_start(runs, space_spec=TOY)
    evo = make_strategy("evolution", ToySpace(), seed=0, options={"population": 8, "sample_size": 3, "inherit": True})
    tell_warm_start(evo, warm)
    child = evo.ask()
    assert child.inherit_from == child.parent < 0
    assert {m.trial_id for m in evo.population} == {w.trial.trial_id for w in warm[-8:]}  # the latest 8 live on


def test_a_warm_started_evolution_beats_a_cold_one_on_the_same_budget(tmp_path):
    """10 seeds: the best of 30 trials after a 60-trial run of the same space against 30 from nothing."""
    warm_best, cold_best = [], []
    for seed in range(10):
        run = toy_run(tmp_path / f"r{seed}", budget=60, seed=100 + seed, population=20, sample_size=5)
        evo = make_strategy("evolution", ToySpace(), seed=seed, options={"population": 20, "sample_size": 5})
        warm = load_warm_start([run], space_spec=TOY)
        tell_warm_start(evo, warm)
        warm_best.append(toy_search(evo, 30))  # its own 30 trials only (measured: mean -0.7 against -2.7)
        cold = make_strategy("evolution", ToySpace(), seed=seed, options={"population": 20, "sample_size": 5})
        cold_best.append(toy_search(cold, 30))
    assert sum(warm_best) / 10 > sum(cold_best) / 10 + 1.0


class NotWeights:
    pass


def test_kept_weights_of_a_warm_trial_are_found_and_checked(tmp_path):
    """A real PBT run on digits keeps every segment's checkpoint and best.pt; nothing else is read as weights."""
    run = tmp_path / "pbt"
    nas.search("toy", "pbt", budget=3, executor="inprocess", data=nas.load_dataset("digits"), seed=0, run_dir=run,
               settings=TrainSettings(epochs=1, seed=0), strategy_options={"population": 3, "quantile": 0.34})
    warm = load_warm_start([run], space_spec=TOY)
    by_id = {w.trial.trial_id: w for w in warm}
    for w in warm:
        data = warm_checkpoint(by_id, w.trial.trial_id)
        state = torch.load(io.BytesIO(data), weights_only=True)
        assert state["arch"] == dict(w.trial.arch) and "model" in state
    assert warm_checkpoint(by_id, 5) is None  # no warm trial of that id
    best = json.loads((run / "best.json").read_text())["trial_id"]
    for p in (run / "checkpoints").glob("*.pt"):
        p.unlink()
    assert kept_checkpoint(run, best) == (run / "best.pt").read_bytes()  # the best is kept in best.pt too
    other = next(w.source_id for w in warm if w.source_id != best)
    assert kept_checkpoint(run, other) is None
    buf = io.BytesIO()
    torch.save({"model": NotWeights()}, buf)
    (run / "checkpoints" / f"{other}.pt").write_bytes(buf.getvalue())
    with pytest.raises(ValueError, match=r"checkpoints/\d+.pt is not a plain checkpoint"):
        kept_checkpoint(run, other)


def test_a_warm_start_from_a_run_trained_otherwise_is_warned_of(tmp_path, caplog):
    """(A run on synthetic data for 3 epochs warm-started one on digits for 1, silently: its 0.99 scores outranked
    every digits score, so its architectures were the parents.)"""
    kw = dict(budget=2, executor="inprocess", seed=0, progress=False,
              strategy_options={"population": 2, "sample_size": 2})
    nas.search("toy", "evolution", data="synthetic", epochs=2, run_dir=tmp_path / "a", **kw)
    with caplog.at_level("WARNING", logger="nas.run.warmstart"):
        nas.search("toy", "evolution", data="digits", epochs=1, run_dir=tmp_path / "b",
                   warm_start=[str(tmp_path / "a")], **kw)
    said = [r.message for r in caplog.records if "trained on other data" in r.message]
    assert len(said) == 1 and said[0] == (f"warm-start run {str(tmp_path / 'a')!r} trained on other data (synthetic, "
                                          "not digits) and for 2 epochs, not 1: its scores are told to the strategy "
                                          "as this search's would be")
    caplog.clear()
    with caplog.at_level("WARNING", logger="nas.run.warmstart"):
        nas.search("toy", "evolution", data="synthetic", epochs=2, run_dir=tmp_path / "c",
                   warm_start=[str(tmp_path / "a")], **kw)
    assert not [r for r in caplog.records if "trained" in r.message]  # (the same training: nothing to say)


def test_children_of_warm_trials_whose_run_kept_no_weights_train_from_scratch(tmp_path):
    """(Every child of a warm parent without kept weights failed as CHECKPOINT_MISSING, 5 of 12 trials, and the parent
    stayed in the population making more.)"""
    kw = dict(executor="inprocess", seed=0, progress=False, data=nas.load_dataset("digits"), epochs=1)
    nas.search("toy", "random", budget=8, run_dir=tmp_path / "a", **kw)  # (it keeps best.pt alone)
    df = nas.search("toy", "evolution", budget=12, run_dir=tmp_path / "b", warm_start=[str(tmp_path / "a")],
                    strategy_options={"population": 8, "sample_size": 3, "inherit": True}, **kw)
    assert df.failure.isna().all()
    own = df[df.trial_id >= 0]
    children = own[own.parent.notna() & (own.parent < 0)]
    missing = [m for m in children.metrics if "inherit_missing" in m]
    assert len(children) >= 2 and missing and all(m["inherit_missing"] < 0 for m in missing)


def test_a_warm_started_run_keeps_the_warm_trials_it_was_told_though_its_source_went_on(tmp_path):
    """(It re-read the source run when shown or resumed: after the source grew from 3 to 6 trials, its results listed
    6 warm trials its strategy never saw, and a resume told them all.)"""
    a = toy_run(tmp_path / "a", strategy="random", budget=3)
    kw = dict(workers=1, executor="inprocess", seed=0, run_dir=tmp_path / "b", data=None, train=scored(toy_score),
              warm_start=[str(a)], strategy_options={"population": 4, "sample_size": 2})
    nas.search("toy", "evolution", budget=3, **kw)
    assert json.loads((tmp_path / "b" / "run.json").read_text())["search"]["warm_start_counts"] == [3]
    nas.search("toy", "random", budget=6, workers=1, executor="inprocess", seed=0, run_dir=a, data=None,
               train=scored(toy_score), resume=True)
    from nas.run.warmstart import load_run_with_warm

    assert (load_run_with_warm(tmp_path / "b")[1].trial_id < 0).sum() == 3
    df = nas.search("toy", "evolution", budget=4, resume=True, **kw)
    assert (df.trial_id < 0).sum() == 3 and (df.trial_id >= 0).sum() == 4
