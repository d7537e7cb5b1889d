"""Population-based training (Jaderberg et al. 2017): segments, exploit/explore, real weight copies."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import nas
from nas.core.types import Outcome, Result
from nas.engine.inprocess import InProcessExecutor
from nas.engine.loop import SearchLoop
from nas.search_spaces.toy import ToySpace, toy_score
from nas.strategies.pbt import PopulationBasedTraining
from nas.strategies.random import RandomSearch
from nas.train.settings import TrainSettings
from nas.train.simple import scored
from tests.helpers import saving_curve


def complete(trial, score, epoch=1):
    return Result(trial.trial_id, Outcome.COMPLETE, score=score, epoch=epoch)


def test_segments_continue_from_the_members_own_checkpoint():
    pbt = PopulationBasedTraining(ToySpace(), population=4, interval=2, seed=0)
    first = [pbt.ask() for _ in range(4)]
    assert [t.member for t in first] == [0, 1, 2, 3] and pbt.ask() is None
    assert all(t.checkpoint_from is None and t.save_checkpoint and t.epochs == 2 for t in first)
    for i, t in enumerate(first):
        pbt.tell(t, complete(t, 1.0 + i, epoch=2))  # the quantile holds none before the fourth, the best
    for t in first:
        nxt = pbt.ask()
        assert (nxt.member, nxt.checkpoint_from, nxt.arch, nxt.hparams) == (
            t.member, t.trial_id, t.arch, t.hparams)
    assert pbt.members[0].epoch == 2


def test_bottom_member_exploits_a_top_member_and_explores_its_hparams():
    pbt = PopulationBasedTraining(ToySpace(), population=4, quantile=0.25, resample_probability=0.0, seed=0)
    first = [pbt.ask() for _ in range(4)]
    for t, s in zip(first[1:], [5.0, 6.0, 9.0]):
        pbt.tell(t, complete(t, s, epoch=3))
    pbt.tell(first[0], complete(first[0], 1.0, epoch=1))  # the worst: retired
    top = first[3]
    child = next(t for t in (pbt.ask() for _ in range(4)) if t.member == 0)
    assert child.member == 0 and child.checkpoint_from == top.trial_id == child.parent
    assert child.arch == top.arch and child.arch != first[0].arch
    ratio = child.hparams["lr"] / top.hparams["lr"]
    assert ratio == pytest.approx(0.8) or ratio == pytest.approx(1.2)
    assert pbt.members[0].epoch == 3  # goes on from the donor's epoch
    assert list(pbt.exploits) == [{"trial": first[0].trial_id, "member": 0, "donor": 3, "donor_trial": top.trial_id,
                             "retired_arch": first[0].arch}]


def test_explore_perturbs_clips_and_resamples_within_ranges():
    spec = {"lr": {"low": 1e-3, "high": 1e-1}, "batch_size": [16, 32, 64, 128]}
    pbt = PopulationBasedTraining(ToySpace(), hparams=spec, resample_probability=0.0, seed=0)
    for _ in range(50):
        out = pbt._explore({"lr": 0.1, "batch_size": 32})
        assert out["lr"] in (pytest.approx(0.08), 0.1) and out["batch_size"] in (16, 64)
    pbt.resample_probability = 1.0
    lrs = [pbt._explore({"lr": 0.01, "batch_size": 32})["lr"] for _ in range(200)]
    assert min(lrs) >= 1e-3 and max(lrs) <= 1e-1 and np.median(lrs) == pytest.approx(1e-2, rel=0.5)


def test_a_failed_segment_retires_its_member():
    pbt = PopulationBasedTraining(ToySpace(), population=5, seed=0)
    first = [pbt.ask() for _ in range(5)]
    for t, s in zip(first[:4], [1.0, 2.0, 3.0, 4.0]):
        pbt.tell(t, complete(t, s))
    pbt.tell(first[4], Result.failed(first[4].trial_id, "NaN loss"))
    assert pbt.exploits[-1]["member"] == 4 and pbt.members[4].source == first[3].trial_id


def toy_training(pbt_or_random, budget, in_flight=3):
    """A toy trainer where hparams matter: each epoch adds ``gain(lr)`` (best at lr=1e-2) to a
    progress kept in the checkpoint; score = toy_score(arch) + 10 (1 - exp(-0.3 progress))."""
    progress, best, pending, asked = {}, -math.inf, [], []
    for _ in range(budget):
        while len(pending) < in_flight:
            t = pbt_or_random.ask()
            if t is None:
                break
            pending.append(t)
            asked.append(t)
        t = pending.pop(0)
        lr = t.hparams.get("lr", 1e-2)
        start = progress[t.checkpoint_from] if t.checkpoint_from is not None else 0.0
        progress[t.trial_id] = start + math.exp(-((math.log10(lr) + 2) ** 2))
        score = toy_score(t.arch) + 10 * (1 - math.exp(-0.3 * progress[t.trial_id]))
        pbt_or_random.tell(t, complete(t, score))
        best = max(best, score)
    return best, asked


def test_pbt_beats_random_search_where_training_and_hparams_matter():
    """Equal budgets of one-epoch trials over 10 fixed seeds; PBT's explore also moves lr toward 1e-2."""
    pbt_best, rnd_best, drift = [], [], []
    for seed in range(10):
        pbt = PopulationBasedTraining(ToySpace(), population=16, interval=1, seed=seed)
        best, asked = toy_training(pbt, 200)
        pbt_best.append(best)
        rnd_best.append(toy_training(RandomSearch(ToySpace(), seed=seed), 200)[0])
        initial = [abs(math.log10(t.hparams["lr"]) + 2) for t in asked if t.checkpoint_from is None]
        drift.append(np.mean([abs(math.log10(m.hparams["lr"]) + 2) for m in pbt.members]) - np.mean(initial))
    assert np.mean(pbt_best) > np.mean(rnd_best) + 2.0
    assert np.mean(drift) < 0


@pytest.fixture(scope="module")
def digits():
    return nas.load_dataset("digits")


def test_exploit_really_copies_weights_and_retired_architectures_leave(digits):
    """Real PyTorch training on digits: the exploiting child's first epoch starts at the donor's level."""
    space = ToySpace()
    pbt = PopulationBasedTraining(space, population=4, interval=1, resample_probability=0.0, seed=0)
    ex = InProcessExecutor(space, digits, TrainSettings(epochs=1, seed=0), slots=1)
    results = {t.trial_id: (t, r) for t, r in SearchLoop(pbt, ex, budget=12).run()}
    assert all(r.ok for _, r in results.values())
    initial_archs = {nas.core.types.arch_key(results[i][0].arch) for i in range(4)}
    children = [t for t, _ in results.values()
                if t.checkpoint_from is not None and results[t.checkpoint_from][0].member != t.member]
    assert children, "the population of 4 saw no exploit in 12 segments"
    for child in children:
        donor_trial, donor = results[child.checkpoint_from]
        fresh = next(r for t, r in results.values() if t.member == donor_trial.member and t.checkpoint_from is None)
        first = results[child.trial_id][1].history[0]
        assert first["epoch"] == donor.epoch + 1  # goes on from the donor's epoch
        assert child.arch == donor_trial.arch
        assert first["train_loss"] < 0.5 * fresh.history[0]["train_loss"]  # not from scratch
        assert first["val_acc"] >= donor.score - 0.1
    final = {nas.core.types.arch_key(a) for a in pbt.architectures()}
    assert len(initial_archs) == 4 and final < initial_archs  # architectures only leave
    # the first retirement's architecture was its member's alone (no copies before it): gone for good
    assert nas.core.types.arch_key(pbt.exploits[0]["retired_arch"]) not in final


def test_a_member_without_data_goes_on_from_its_donors_epoch():
    """A training function run without data (data=None) got no checkpoint back: every segment, an exploiting
    member's too, started again at epoch 1."""
    space = ToySpace()
    pbt = PopulationBasedTraining(space, population=4, interval=2, resample_probability=0.0, seed=0)
    results = {t.trial_id: (t, r) for t, r in
               SearchLoop(pbt, InProcessExecutor(space, None, train=saving_curve), budget=24).run()}
    assert all(r.ok for _, r in results.values())
    continued = [(t, r) for t, r in results.values() if t.checkpoint_from is not None]
    children = [t for t, _ in continued if results[t.checkpoint_from][0].member != t.member]
    assert len(continued) == 20 and children, "no member exploited another in 24 segments"
    for t, r in continued:
        assert r.history[0]["epoch"] == results[t.checkpoint_from][1].epoch + 1


def test_trainers_without_checkpoints_make_pbt_stop_asking_for_them():
    """ScoreTrainer keeps no checkpoints: once a member's fresh segment proves it (at most population +
    slots failed segments), PBT stops asking for checkpoints and segments train from scratch."""
    space = ToySpace()
    pbt = PopulationBasedTraining(space, population=4, seed=0)
    ex = InProcessExecutor(space, None, train=scored(toy_score), slots=2)
    results = SearchLoop(pbt, ex, budget=30).run()
    failed = [r for _, r in results if not r.ok]
    assert not pbt.checkpoints and len(results) == 30
    assert 0 < len(failed) <= 4 + 2 and all("no checkpoint is kept" in r.error for r in failed)
    assert all(t.checkpoint_from is None for t, _ in results[-10:])


@pytest.mark.parametrize(("options", "message"), [
    ({"population": 0}, "population must be an integer >= 1, got 0"),
    ({"quantile": 0.7}, "quantile must be in \\[0.0, 0.5\\]"),
    ({"population": 4, "quantile": 0.2}, r"population x quantile must be >= 1 .*, got population=4, quantile=0.2 "
                                          r"\(0.8\); with 4 members quantile >= 0.25"),
    ({"population": 1}, r"got population=1, quantile=0.25 \(0.25\); with 1 member no quantile <= 0.5 does"),
    ({"interval": 0}, "interval must be an integer >= 1"),
    ({"resample_probability": 2}, "resample_probability must be in"),
    ({"hparams": {"lr": {"low": 0.1, "high": 0.01}}}, "hparam 'lr': low < high"),
    ({"hparams": {"lr": {"low": 0.0, "high": 0.1}}}, "low > 0 on a log scale"),
    ({"hparams": {"lr": {"min": 0.1}}}, "hparam 'lr': a range is"),
    ({"hparams": {"batch_size": []}}, "hparam 'batch_size': give a range"),
    ({"hparams": {}}, "hparams must be a non-empty mapping"),
])
def test_bad_options_are_named(options, message):
    with pytest.raises(ValueError, match=message):
        PopulationBasedTraining(ToySpace(), **options)


def test_checkpoints_outlive_the_driver_so_a_resumed_pbt_run_continues_its_members(digits, tmp_path):
    """Segments' checkpoints are written to the run directory; a resume (a new executor, nothing in
    memory) reads them back, so members continue from their weights instead of restarting."""
    run_dir = tmp_path / "run"
    common = dict(executor="inprocess", data=digits, seed=0, run_dir=run_dir,
                  settings=TrainSettings(epochs=1, seed=0), strategy_options={"population": 2, "quantile": 0.5})
    nas.search("toy", "pbt", budget=4, **common)
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("*.pt")) == ["0.pt", "1.pt", "2.pt", "3.pt"]
    df = nas.search("toy", "pbt", budget=8, resume=True, **common)
    resumed = df[df.trial_id >= 4]
    assert len(resumed) == 4 and (resumed.state == "COMPLETE").all(), resumed.error.tolist()
    epochs = dict(zip(df.trial_id, df.epochs))
    for _, row in resumed.iterrows():  # each segment goes on from the epoch its source had reached
        assert row.epochs == epochs[row.checkpoint_from] + 1


@pytest.mark.parametrize(("hparams", "said"), [
    ({"dropout": [0.1, 0.2]}, "hparams ['dropout'] are none a trial may set; known: lr, batch_size"),
    ({"optimizer": ["adam", "rmsprop"]}, "hparams 'optimizer': unknown optimizer 'rmsprop'; known: adam, adamw, sgd"),
    ({"momentum": {"low": 0.5, "high": 1.5, "log": False}}, "hparams 'momentum': momentum must be"),
])
def test_hparams_no_trial_takes_are_refused_before_the_search(tmp_path, capsys, hparams, said):
    """(An unknown name or value passed the checks: every trial failed "unknown hyperparameters", exit status 0.)"""
    from nas.cli import main

    assert main(["search", "--space", "toy", "--strategy", "pbt", "-o", f"hparams={json.dumps(hparams)}",
                 "--executor", "inprocess", "--dataset", "none", "--budget", "2", "--run-dir",
                 str(tmp_path / "run")]) == 2
    assert said in capsys.readouterr().err and not (tmp_path / "run").exists()


USED: dict[int, dict] = {}  # trial id -> the optimizer's group hyperparameters at its first step


def recording_fit(ctx):
    """The built-in trainer, recording what the optimizer used at the first step of each trial."""
    import torch

    from nas.train.fit import fit

    step = torch.optim.SGD.step

    def first(opt, *a, **k):
        USED.setdefault(ctx.trial.trial_id, {k2: opt.param_groups[0][k2] for k2 in ("lr", "momentum", "nesterov")})
        return step(opt, *a, **k)

    torch.optim.SGD.step = first
    try:
        fit(ctx)
    finally:
        torch.optim.SGD.step = step


def test_an_exploit_trains_with_the_explored_momentum_not_the_donors(digits, tmp_path):
    """(Loading the donor's optimizer state restored its momentum, beta1 and nesterov: only lr and weight decay were
    set back, so an explored momentum never took effect after an exploit, while the journal recorded it.)"""
    USED.clear()
    hparams = {"lr": {"low": 1e-3, "high": 0.3, "log": True}, "momentum": {"low": 0.1, "high": 0.95}}
    df = nas.search(ToySpace(), "pbt", budget=8, epochs=2, executor="inprocess", data=digits, seed=0,
                    run_dir=tmp_path / "run", progress=False, train=recording_fit, optimizer="sgd",
                    strategy_options={"population": 2, "quantile": 0.5, "interval": 2, "hparams": hparams,
                                      "resample_probability": 0.0})
    continued = df[df.checkpoint_from.notna()]
    assert len(continued) >= 4
    for t in df.itertuples():
        assert USED[t.trial_id]["momentum"] == pytest.approx(t.hparams["momentum"]), t.trial_id
        assert USED[t.trial_id]["lr"] == pytest.approx(t.hparams["lr"])
    hparams_of = df.set_index("trial_id").hparams
    assert any(hparams_of[int(t.checkpoint_from)]["momentum"] != t.hparams["momentum"] for t in continued.itertuples())
    # (an exploit whose explored momentum differs from its donor's)


def test_searched_augmentation_on_inputs_that_are_not_images_is_refused_before_the_search(tmp_path):
    """(Each member that drew flip failed as ERROR, "augmentation {'flip': True} needs image inputs", one by one.)"""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(60, 20)).astype("float32")
    flat = nas.Dataset.from_arrays(x, (x[:, 0] > 0).astype("int64"))
    with pytest.raises(ValueError, match=r"hparams 'flip' searches augmentation \(\[True, False\]\), which needs "
                                         r"image inputs \(channels, height, width\); this dataset's inputs have "
                                         r"shape \(20,\)"):
        nas.search(ToySpace(), "pbt", budget=2, epochs=1, executor="inprocess", data=flat, seed=0, progress=False,
                   run_dir=tmp_path / "run", strategy_options={"population": 2, "quantile": 0.5,
                                                               "hparams": {"flip": [True, False]}})
    assert not (tmp_path / "run").exists()


def test_a_range_of_a_whole_number_hyperparameter_is_drawn_and_explored_in_whole_numbers(digits, tmp_path):
    """(A cutout range drew 1.809..., which failed every trial that drew it, and the search ended with exit status 0;
    a batch_size range journaled 16.75 while 16 trained.)"""
    hparams = {"cutout": {"low": 1, "high": 4, "log": False}, "batch_size": {"low": 16, "high": 256}}
    df = nas.search(ToySpace(), "pbt", budget=8, epochs=1, executor="inprocess", data=digits, seed=0, progress=False,
                    run_dir=tmp_path / "run", strategy_options={"population": 2, "quantile": 0.5, "hparams": hparams})
    assert (df.state == "COMPLETE").all()
    for hp, metrics in zip(df.hparams, df.metrics, strict=True):
        assert type(hp["cutout"]) is int and 1 <= hp["cutout"] <= 4
        assert type(hp["batch_size"]) is int and hp["batch_size"] == metrics["hparams"]["batch_size"]


def test_a_run_whose_recorded_options_are_refused_now_says_it_cannot_be_resumed(tmp_path):
    """(A PBT run made with 3 members at the default quantile, before that was refused, was refused on resume with
    advice to give an option a resume does not take.)"""
    run = tmp_path / "run"
    kw = dict(executor="inprocess", data=None, train=scored(toy_score), seed=0, progress=False, run_dir=run)
    nas.search(ToySpace(), "pbt", budget=4, strategy_options={"population": 4}, **kw)
    cfg = json.loads((run / "run.json").read_text())
    cfg["search"]["strategy_options"]["population"] = 3  # (as the old version recorded it)
    (run / "run.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=rf"^cannot resume {str(run)!r}: this version refuses its strategy's options "
                                         r"as run.json records them \(population x quantile must be >= 1 .*\); its "
                                         r"finished trials stay readable \(nas results\)"):
        nas.search(ToySpace(), "pbt", budget=6, strategy_options={"population": 3}, resume=True, **kw)


def test_a_small_whole_number_hyperparameter_moves_when_explored():
    """(x 0.8 and x 1.2 rounded 0, 1 and 2 back to themselves: only a resample ever moved a cutout of 1.)"""
    pbt = PopulationBasedTraining(ToySpace(), population=4, seed=0, resample_probability=0.0,
                                  hparams={"cutout": {"low": 0, "high": 8, "log": False}})
    moved = {pbt._explore({"cutout": v})["cutout"] for v in (0, 1, 2) for _ in range(10)}
    assert {0, 1, 2, 3} <= moved and all(type(v) is int for v in moved)


def test_a_pbt_segment_that_trains_from_scratch_is_warned_of(tmp_path, caplog):
    """(PBT's segments are new trials, not continued ones, so one that ignored its checkpoint and reported from
    epoch 1 again was not warned of, though the warning names an exploit.)"""
    def restarting(ctx):
        for epoch in range(1, ctx.epochs + 1):
            ctx.checkpoint.save({"epoch": epoch})
            ctx.report(epoch=epoch, val_acc=toy_score(ctx.trial.arch) + epoch)

    with caplog.at_level("WARNING", logger="nas.engine.loop"):
        nas.search(ToySpace(), "pbt", budget=8, epochs=4, executor="inprocess", data=None, train=restarting, seed=0,
                   run_dir=tmp_path / "run", progress=False, strategy_options={"population": 4, "interval": 2})
    said = [r.message for r in caplog.records if "was continued from epoch" in r.message]
    assert len(said) == 1 and "reported epoch 1" in said[0]
