"""The per-trial training hyperparameters: their names, checks, and what they make (optimizer, loss,
schedule, augmentation). :class:`nas.train.settings.TrainSettings` holds the run's defaults; a trial's ``hparams``
override any of :data:`TRIAL_HPARAMS` by name.

>>> hp = check_hparams({"lr": 0.1, "optimizer": "sgd", "nesterov": True, "schedule": "cosine",
...                     "crop_padding": 4, "flip": True})
>>> augmentation(hp)
Augment(crop_padding=4, flip=True, cutout=0)
>>> check_hparams({"schedule": "linear"})
Traceback (most recent call last):
ValueError: unknown schedule 'linear'; known: constant, cosine, step
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from nas.core.nearest import did_you_mean
from nas.train.schedules import SCHEDULES, Schedule

if TYPE_CHECKING:
    import torch

    from nas.train.augment import Augment

OPTIMIZERS = ("adam", "adamw", "sgd")
#: hyperparameters a trial may set (``Trial.hparams``), each also a TrainSettings field
TRIAL_HPARAMS = ("lr", "batch_size", "weight_decay", "momentum", "optimizer", "nesterov", "schedule",
                 "warmup_epochs", "min_lr", "step_epochs", "gamma", "label_smoothing", "grad_clip",
                 "crop_padding", "flip", "cutout")
AUGMENT_HPARAMS = ("crop_padding", "flip", "cutout")


def _number(hp: Mapping[str, Any], name: str, low: float, high: float | None = None, *, low_open: bool = False,
            integer: bool = False) -> None:
    if name not in hp:
        return
    v = hp[name]
    ok = not isinstance(v, bool) and isinstance(v, int if integer else (int, float))
    ok = ok and math.isfinite(v) and (v > low if low_open else v >= low) and (high is None or v <= high)
    if not ok:
        kind = "an integer" if integer else "a finite number"
        rng = f"{'>' if low_open else '>='} {low:g}" + ("" if high is None else f" and <= {high:g}")
        raise ValueError(f"{name} must be {kind} {rng}, got {v!r}")


def check_searched(spec: Mapping[str, Any]) -> None:
    """The hyperparameters a strategy searches (PBT's ``hparams`` option: name -> a range or choices), checked before
    anything runs: each name one a trial may set (:data:`TRIAL_HPARAMS`), each choice and each end of a range a
    value it takes. (An unknown name or value failed every trial, and the search ended with exit status 0.)

    >>> check_searched({"lr": {"low": 1e-4, "high": 0.1}, "optimizer": ["adam", "sgd"]})
    >>> check_searched({"dropout": [0.1, 0.2]})
    Traceback (most recent call last):
    ...
    ValueError: hparams ['dropout'] are none a trial may set; known: lr, batch_size, weight_decay, momentum, ...
    >>> check_searched({"optimizer": ["adam", "rmsprop"]})
    Traceback (most recent call last):
    ...
    ValueError: hparams 'optimizer': unknown optimizer 'rmsprop'; known: adam, adamw, sgd
    """
    unknown = sorted(set(spec) - set(TRIAL_HPARAMS))
    if unknown:
        raise ValueError(f"hparams {unknown} are none a trial may set; known: {', '.join(TRIAL_HPARAMS)}")
    for name, searched in spec.items():
        for value in _searched_values(searched):
            try:
                check_hparams({name: value})
            except ValueError as e:
                raise ValueError(f"hparams {name!r}: {e}") from None


def _searched_values(searched: Any) -> list[Any]:
    """The values a searched hyperparameter takes at its edges: a range's ends, or its choices (else none: the
    strategy says what is wrong with it)."""
    if isinstance(searched, Mapping):
        return [searched[end] for end in ("low", "high") if end in searched]
    return list(searched) if isinstance(searched, list | tuple) else []


def check_hparams(hp: Mapping[str, Any]) -> dict[str, Any]:
    """``hp`` checked value by value (a ValueError names the first bad one); returns a plain dict."""
    _number(hp, "lr", 0, low_open=True)
    _number(hp, "batch_size", 1, integer=True)
    _number(hp, "weight_decay", 0)
    _number(hp, "momentum", 0, 1)
    _number(hp, "warmup_epochs", 0)
    _number(hp, "min_lr", 0)
    _number(hp, "step_epochs", 1, integer=True)
    _number(hp, "gamma", 0, 1, low_open=True)
    _number(hp, "label_smoothing", 0, 1)
    _number(hp, "crop_padding", 0, integer=True)
    _number(hp, "cutout", 0, integer=True)
    if hp.get("grad_clip") is not None:
        _number(hp, "grad_clip", 0, low_open=True)
    if "optimizer" in hp and hp["optimizer"] not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {hp['optimizer']!r}{did_you_mean(hp['optimizer'], OPTIMIZERS)}; known: "
                         f"{', '.join(OPTIMIZERS)}")
    if "schedule" in hp and hp["schedule"] not in SCHEDULES:
        raise ValueError(f"unknown schedule {hp['schedule']!r}{did_you_mean(hp['schedule'], SCHEDULES)}; known: "
                         f"{', '.join(SCHEDULES)}")
    for name in ("nesterov", "flip"):
        if name in hp and not isinstance(hp[name], bool):
            raise ValueError(f"{name} must be true or false, got {hp[name]!r}")
    if hp.get("nesterov") and hp.get("optimizer", "sgd") == "sgd" and not hp.get("momentum", 0.9) > 0:
        raise ValueError(f"nesterov needs momentum > 0, got momentum={hp.get('momentum')!r}")
    if hp.get("optimizer") in ("adam", "adamw") and hp.get("momentum", 0.9) >= 1:  # (torch's "Invalid beta")
        raise ValueError(f"momentum is {hp['optimizer']}'s beta1, which must be below 1; got {hp['momentum']!r}")
    return dict(hp)


def check_settings_hparams(hp: Mapping[str, Any]) -> None:
    """What a run's own training settings may not say together (a trial's hyperparameters may move apart later: a
    PBT lr below min_lr anneals upward, as asked): a cosine schedule that ends above where it starts, Nesterov with an
    optimizer that has none (both were taken and silently did something else)."""
    if hp.get("schedule") == "cosine" and hp.get("min_lr", 0.0) > hp["lr"]:
        raise ValueError(f"min_lr {hp['min_lr']!r} is above lr {hp['lr']!r}: the cosine schedule anneals from lr down "
                         f"to min_lr")
    if hp.get("nesterov") and hp.get("optimizer") != "sgd":
        raise ValueError(f"nesterov is SGD's; optimizer {hp.get('optimizer')!r} has none (drop nesterov or use sgd)")


def augmentation(hp: Mapping[str, Any]) -> Augment:
    from nas.train.augment import Augment

    return Augment(int(hp.get("crop_padding", 0)), bool(hp.get("flip", False)), int(hp.get("cutout", 0)))


def check_augmentation(hp: Mapping[str, Any], input_shape: tuple[int, ...]) -> None:
    """Augmentation asked for on inputs that are not images ``(C, H, W)``: a ValueError naming both."""
    if any(hp.get(k) for k in AUGMENT_HPARAMS) and len(input_shape) != 3:
        asked = {k: hp[k] for k in AUGMENT_HPARAMS if hp.get(k)}
        raise ValueError(f"augmentation {asked} needs image inputs (channels, height, width); this dataset's "
                         f"inputs have shape {tuple(input_shape)}: set crop_padding=0, flip=false, cutout=0")


def check_searched_augmentation(spec: Mapping[str, Any], input_shape: tuple[int, ...]) -> None:
    """Augmentation a strategy searches (PBT's ``hparams``) on inputs that are not images: a ValueError naming it,
    before the search (each member that drew it failed as ERROR, one by one).

    >>> check_searched_augmentation({"lr": {"low": 0.01, "high": 0.1}, "flip": [True, False]}, (3, 8, 8))
    >>> check_searched_augmentation({"flip": [True, False]}, (20,))
    Traceback (most recent call last):
    ...
    ValueError: hparams 'flip' searches augmentation ([True, False]), which needs image inputs (channels, height, ...
    """
    if len(input_shape) == 3:
        return
    for name in [k for k in spec if k in AUGMENT_HPARAMS]:
        searched = spec[name]
        if any(_searched_values(searched)):
            raise ValueError(f"hparams {name!r} searches augmentation ({searched!r}), which needs image inputs "
                             f"(channels, height, width); this dataset's inputs have shape {tuple(input_shape)}: leave "
                             f"{name} out of hparams")


def make_optimizer(model: torch.nn.Module, hp: Mapping[str, Any]) -> torch.optim.Optimizer:
    """The trial's optimizer with its fused kernel (CPU and CUDA; one kernel for all parameters instead of
    a loop over them: on CPU, 10x faster steps for a small network). ``nesterov`` applies to SGD only."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    fused = bool(params) and all(p.is_floating_point() for p in params)
    if hp["optimizer"] == "sgd":
        return torch.optim.SGD(params, lr=hp["lr"], momentum=hp["momentum"], weight_decay=hp["weight_decay"],
                               nesterov=bool(hp.get("nesterov")) and hp["momentum"] > 0, fused=fused or None)
    cls = torch.optim.AdamW if hp["optimizer"] == "adamw" else torch.optim.Adam
    # momentum is Adam's beta1, as --momentum's help says (it was not passed: any value trained the same)
    return cls(params, lr=hp["lr"], betas=(hp["momentum"], 0.999), weight_decay=hp["weight_decay"],
               fused=fused or None)


def make_schedule(hp: Mapping[str, Any], steps_per_epoch: int, epochs: int) -> Schedule:
    """The trial's learning-rate schedule over ``epochs`` epochs of ``steps_per_epoch`` steps."""
    return Schedule(hp.get("schedule", "constant"), base_lr=hp["lr"], total_steps=steps_per_epoch * epochs,
                    warmup_steps=round(hp.get("warmup_epochs", 0) * steps_per_epoch), min_lr=hp.get("min_lr", 0.0),
                    step_every=max(1, int(hp.get("step_epochs", 30)) * steps_per_epoch),
                    gamma=hp.get("gamma", 0.1))
