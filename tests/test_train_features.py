"""Augmentation, schedules, optimizer options, the streaming path and weights-only checkpoints of the trainer,
on real (tiny) training."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from nas.api import SearchConfig
from nas.cli import main
from nas.core.types import FailureKind, Trial
from nas.search_spaces.macro import MacroSpace
from nas.train.augment import Augment, channel_stats, cutout, hflip, random_crop
from nas.train.data import Dataset, load_dataset
from nas.train.hparams import check_hparams
from nas.train.runner import TrialRunner
from nas.train.schedules import Schedule
from nas.train.settings import TrainSettings
from nas.train.synthetic import synthetic_images

ARCH = {"depth": 1, "width_0": 16, "width_1": 16, "width_2": 16, "kernel_0": 3, "kernel_1": 3, "kernel_2": 3,
        "activation": "relu", "norm": "batch", "dropout": 0.0}


@pytest.fixture(scope="module")
def images():
    x, y = synthetic_images(96, classes=4, size=16, seed=0)
    return Dataset.from_arrays(x, y, seed=0, name="tiny-images")


def test_random_crop_is_a_shifted_window_of_the_zero_padded_image():
    torch.manual_seed(0)
    x = torch.arange(1, 1 + 5 * 2 * 6 * 6, dtype=torch.int64).reshape(5, 2, 6, 6).to(torch.uint8)
    out = random_crop(x, 2)
    padded = torch.nn.functional.pad(x, (2, 2, 2, 2))
    for i in range(5):  # each output image is one of the 25 windows of its padded input
        windows = [padded[i, :, dy:dy + 6, dx:dx + 6] for dy in range(5) for dx in range(5)]
        assert any(torch.equal(out[i], w) for w in windows)
    assert not all(torch.equal(out[i], x[i]) for i in range(5))  # some moved


def test_flip_mirrors_about_half_and_cutout_zeroes_one_square():
    torch.manual_seed(0)
    x = torch.rand(400, 1, 8, 8)
    out = hflip(x)
    flipped = [bool(torch.equal(out[i], x[i].flip(2))) for i in range(400)]
    assert 150 < sum(flipped) < 250 and all(f or torch.equal(out[i], x[i]) for i, f in enumerate(flipped))
    erased = (cutout(torch.ones(200, 3, 16, 16), 4) == 0).float()
    per_image = erased[:, 0].sum((1, 2))
    assert per_image.max() == 16 and per_image.min() >= 4  # a 4x4 square, clipped at a corner to 2x2 at least
    assert torch.equal(erased[:, 0], erased[:, 2])  # the same square in every channel


def test_channel_stats_match_numpy():
    x, _ = synthetic_images(50, classes=3, size=8, seed=1)
    mean, std = channel_stats(x, chunk=7)
    assert np.allclose(mean, x.mean(axis=(0, 2, 3))) and np.allclose(std, x.std(axis=(0, 2, 3)))


def test_schedules():
    cos = Schedule("cosine", base_lr=1.0, total_steps=10)
    lrs = [cos.lr(i) for i in range(11)]
    assert lrs[0] == 1.0 and lrs[-1] == pytest.approx(0.0) and all(a > b for a, b in zip(lrs, lrs[1:]))
    assert Schedule("constant", base_lr=0.3, total_steps=5, warmup_steps=3).lr(1) == pytest.approx(0.2)
    assert Schedule("step", base_lr=1.0, total_steps=9, step_every=3, gamma=0.5).lr(7) == 0.25


@pytest.mark.parametrize("hp, message", [
    ({"label_smoothing": 1.5}, "label_smoothing must be a finite number >= 0 and <= 1, got 1.5"),
    ({"grad_clip": 0}, "grad_clip must be a finite number > 0, got 0"),
    ({"lr": float("inf")}, "lr must be a finite number > 0, got inf"),
    ({"lr": float("nan")}, "lr must be a finite number > 0, got nan"),
    ({"weight_decay": float("inf")}, "weight_decay must be a finite number >= 0, got inf"),
    ({"crop_padding": -1}, "crop_padding must be an integer >= 0, got -1"),
    ({"flip": "yes"}, "flip must be true or false, got 'yes'"),
    ({"nesterov": True, "momentum": 0, "optimizer": "sgd"}, "nesterov needs momentum > 0"),
    ({"optimizer": "adam", "momentum": 1}, "momentum is adam's beta1, which must be below 1; got 1"),  # (torch's)
])
def test_bad_hparams(hp, message):
    with pytest.raises(ValueError, match=message):
        check_hparams(hp)


@pytest.mark.parametrize("kw, message", [
    # (both taken: the schedule annealed upward; nesterov did nothing)
    ({"schedule": "cosine", "lr": 0.01, "min_lr": 5}, "min_lr 5 is above lr 0.01: the cosine schedule anneals from "
                                                      "lr down to min_lr"),
    ({"optimizer": "adamw", "nesterov": True}, "nesterov is SGD's; optimizer 'adamw' has none (drop nesterov or use "
                                               "sgd)"),
])
def test_settings_that_contradict_each_other_are_refused(kw, message):
    with pytest.raises(ValueError) as info:
        TrainSettings(**kw)
    assert str(info.value) == message


def test_augmentation_on_tabular_data_is_one_line():
    tabular = Dataset.from_arrays(np.random.default_rng(0).normal(size=(40, 5)), np.arange(40) % 2)
    with pytest.raises(ValueError, match=r"augmentation \{'flip': True\} needs image inputs .* shape \(5,\)"):
        TrialRunner(tabular, TrainSettings(flip=True, device="cpu"))
    trainer = TrialRunner(tabular, TrainSettings(device="cpu", epochs=1))
    space = MacroSpace()
    result, _ = trainer.run(Trial(0, ARCH, hparams={"cutout": 4}), space, None)  # per trial: a FAILED trial
    assert not result.ok and "augmentation {'cutout': 4} needs image inputs" in result.error


def test_uint8_images_train_with_every_option_and_the_checkpoint_loads_weights_only(images):
    settings = TrainSettings(epochs=2, batch_size=16, device="cpu", threads=1, optimizer="sgd", nesterov=True,
                             lr=0.1, schedule="cosine", warmup_epochs=0.5, label_smoothing=0.1, grad_clip=1.0,
                             crop_padding=2, flip=True, cutout=4, weight_decay=5e-4)
    trainer = TrialRunner(images, settings)
    assert trainer.side.feed.x_train.dtype == torch.uint8  # 1 byte a pixel on the device
    result, ckpt = trainer.run(Trial(0, ARCH), MacroSpace(), None)
    assert result.ok, result.error
    assert [h["epoch"] for h in result.history] == [1, 2] and result.history[-1]["lr"] < 0.01  # cosine ended
    state = torch.load(io.BytesIO(ckpt), weights_only=True)
    assert state["optimizer"]["param_groups"][0]["nesterov"] is True and state["optimizer"]["state"]
    assert len(state["normalization"]["mean"]) == 3 and state["hparams"]["grad_clip"] == 1.0
    again, _ = trainer.run(Trial(1, ARCH, epochs=1), MacroSpace(), ckpt)  # continues from the checkpoint
    assert again.ok and again.epoch == 3
    adam, ckpt2 = trainer.run(Trial(2, ARCH, hparams={"optimizer": "adam", "momentum": 0.5}), MacroSpace(), None)
    state = torch.load(io.BytesIO(ckpt2), weights_only=True)
    assert adam.ok and state["optimizer_name"] == "adam"
    assert state["optimizer"]["param_groups"][0]["betas"][0] == 0.5  # (--momentum is Adam's beta1: it was ignored)


@pytest.mark.parametrize("extra", [{}, {"measure_costs": False}, {"proxy_screen": "params:1"}])
def test_the_metrics_the_builtin_trainer_reports_are_the_names_an_objective_is_checked_against(images, extra):
    """``TrainSettings.reported`` (what ``nas search`` checks an ``--objective`` against before anything starts, in
    a module that does not import torch) lists exactly the numeric metrics a built-in trial's result holds."""
    settings = TrainSettings(epochs=1, batch_size=16, device="cpu", threads=1, **extra)
    result, _ = TrialRunner(images, settings).run(Trial(0, ARCH), MacroSpace(), None)
    assert result.ok, result.error
    numeric = {k for k, v in result.metrics.items() if v is None or isinstance(v, int | float)}
    assert numeric == set(settings.reported())


def test_the_builtin_trainer_without_data_is_a_failed_trial_that_says_so():
    """(From Python with data=None and a custom space; `nas search` refuses --dataset none with it at once.)"""
    result, _ = TrialRunner(None, TrainSettings(device="cpu")).run(Trial(0, ARCH), MacroSpace(), None)
    assert result.failure is FailureKind.ERROR
    assert result.error.endswith("the built-in trainer needs a model and data; this trial has no data (a space that "
                                 "builds models, a dataset)")


def test_same_seed_same_training(images):
    settings = TrainSettings(epochs=1, batch_size=16, device="cpu", threads=1, crop_padding=2, flip=True, cutout=4)
    a = TrialRunner(images, settings).run(Trial(3, ARCH), MacroSpace(), None)[0]
    b = TrialRunner(images, settings).run(Trial(3, ARCH), MacroSpace(), None)[0]
    assert a.history[0]["train_loss"] == b.history[0]["train_loss"]


def test_streaming_path_takes_over_over_the_budget_and_says_so(images, caplog):
    settings = TrainSettings(epochs=1, batch_size=16, device="cpu", threads=1, crop_padding=2, flip=True,
                             data_budget_mb=0.001, loader_workers=1)
    with caplog.at_level("WARNING", logger="nas.train.device"):
        trainer = TrialRunner(images, settings)
    assert "exceeds the device data budget" in caplog.text and "streaming it from host memory" in caplog.text
    result, _ = trainer.run(Trial(0, ARCH), MacroSpace(), None)
    assert result.ok, result.error
    assert result.metrics["data_path"] == "streaming"
    resident = TrialRunner(images, TrainSettings(epochs=1, batch_size=16, device="cpu", threads=1))
    assert resident.run(Trial(0, ARCH), MacroSpace(), None)[0].metrics["data_path"] == "device"


def test_recipe_fills_settings_and_given_options_win():
    cfg = SearchConfig.from_mapping({"recipe": "nb201", "epochs": 3})
    s = cfg.train.settings
    assert (s.epochs, s.lr, s.batch_size, s.optimizer, s.nesterov, s.schedule, s.weight_decay) == (
        3, 0.1, 256, "sgd", True, "cosine", 5e-4)
    assert (s.crop_padding, s.flip) == (4, True)
    with pytest.raises(ValueError, match="unknown recipe 'nb999'; known: nb201, nb201-12"):
        SearchConfig.from_mapping({"recipe": "nb999"})
    # (another optimizer given over the recipe kept its SGD-only nesterov: refused, "drop nesterov")
    s = SearchConfig.from_mapping({"recipe": "nb201", "optimizer": "adam"}).train.settings
    assert (s.optimizer, s.nesterov, s.lr, s.schedule) == ("adam", False, 0.1, "cosine")
    with pytest.raises(ValueError, match="nesterov is SGD's; optimizer 'adam' has none"):  # (given: still refused)
        SearchConfig.from_mapping({"recipe": "nb201", "optimizer": "adam", "nesterov": True})


def test_a_recipe_given_over_a_config_fills_only_what_it_leaves_at_its_defaults(tmp_path):
    """(A recipe on the command line, or a keyword over a RunConfig, overwrote the config file's own epochs, lr and
    batch_size: a 1-epoch search became a 200-epoch one, with no word said.)"""
    import argparse

    from nas.cli.flags import add_config_flags, config_from_args

    base = SearchConfig.from_mapping({"space": "toy", "epochs": 1, "lr": 0.05, "batch_size": 32})
    s = base.updated({"recipe": "nb201"}).train.settings
    assert (s.epochs, s.lr, s.batch_size, s.optimizer, s.schedule) == (1, 0.05, 32, "sgd", "cosine")
    (tmp_path / "run.toml").write_text('space = "toy"\nepochs = 1\nlr = 0.05\nbatch_size = 32\n')
    parser = argparse.ArgumentParser()
    add_config_flags(parser)
    parser.add_argument("--config")
    args = parser.parse_args(["--config", str(tmp_path / "run.toml"), "--recipe", "nb201", "--lr", "0.02"])
    s = config_from_args(args).train.settings
    assert (s.epochs, s.lr, s.batch_size, s.weight_decay) == (1, 0.02, 32, 5e-4)


def test_recipe_on_tabular_data_and_cli_listing(tmp_path, capsys):
    np.savez(tmp_path / "tab.npz", x=np.random.default_rng(0).normal(size=(30, 4)), y=np.arange(30) % 2)
    code = main(["search", "--space", "macro", "--executor", "inprocess", "--recipe", "nb201", "--dataset",
                 str(tmp_path / "tab.npz"), "--run-dir", str(tmp_path / "r"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "needs image inputs" in err and len(err.strip().splitlines()) == 1
    assert main(["recipes"]) == 0 and "nb201 " in capsys.readouterr().out
    assert main(["recipes", "-v"]) == 0 and "Table 1" in capsys.readouterr().out


def test_digits_still_train_as_float32():
    ds = load_dataset("digits")
    assert ds.x_train.dtype == np.float32
    trainer = TrialRunner(ds, TrainSettings(epochs=1, device="cpu", threads=1, flip=True))
    assert trainer.side.feed.normalize is None and trainer.run(Trial(0, ARCH), MacroSpace(), None)[0].ok


def test_augment_off_by_default():
    assert not Augment().active and not TrainSettings().flip
