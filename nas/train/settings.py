"""The training settings every trial starts from (:class:`TrainSettings`): a recipe fills them, the CLI's
flags and a config file override them, and a trial's ``hparams`` override any of
:data:`nas.train.hparams.TRIAL_HPARAMS` for that trial alone.

>>> TrainSettings(epochs=3, objectives=("loss:min",)).objectives
('loss:min',)
>>> TrainSettings(max_flops=-1)
Traceback (most recent call last):
...
ValueError: max_flops must be a positive number, got -1
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from nas.core.objectives import Objectives
from nas.core.types import Trial
from nas.train.constraints import Constraints
from nas.train.hparams import TRIAL_HPARAMS, check_augmentation, check_hparams

if TYPE_CHECKING:
    from nas.train.data import Dataset


@dataclasses.dataclass(frozen=True)
class TrainSettings:
    """Defaults for every trial; a trial's ``hparams`` override any of
    :data:`nas.train.hparams.TRIAL_HPARAMS` by name (the optimizer and its options, the learning-rate
    schedule, label smoothing, gradient clipping, augmentation). A recipe (:mod:`nas.train.recipes`) is a
    named set of these values."""

    epochs: int = 5
    lr: float = 1e-2
    batch_size: int = 64
    weight_decay: float = 0.0
    momentum: float = 0.9
    optimizer: str = "adam"
    nesterov: bool = False  # Nesterov momentum (SGD only)
    schedule: str = "constant"  # constant, cosine (to min_lr over the epochs) or step (x gamma every step_epochs)
    warmup_epochs: float = 0.0  # linear warm-up of the learning rate (any schedule)
    min_lr: float = 0.0  # where cosine ends
    step_epochs: int = 30
    gamma: float = 0.1
    label_smoothing: float = 0.0
    grad_clip: float | None = None  # max global gradient norm; None: no clipping
    crop_padding: int = 0  # augmentation (image inputs only): random crop after this much zero padding
    flip: bool = False  # random horizontal flip
    cutout: int = 0  # side of the cutout square; 0: off
    data_budget_mb: float | None = None  # device memory the dataset may take; None: half the free GPU memory
    loader_workers: int = 2  # DataLoader worker processes when the dataset streams from host memory
    device: str = "auto"  # "auto" (CUDA when the worker has a GPU), "cpu" or "cuda"
    amp: bool = True  # bf16 autocast on devices that support it
    channels_last: bool = True  # for 4-d inputs on CUDA
    threads: int | None = None  # torch CPU threads per worker; None: the worker's CPU share
    max_params: int = 50_000_000  # larger candidates are INFEASIBLE at once instead of exhausting memory
    max_flops: float | None = None  # constraints checked after the build, before training (INFEASIBLE)
    max_latency_ms: float | None = None
    objectives: tuple[str, ...] = ("val_acc:max",)  # metrics and modes (nas.core.objectives); the first is `score`
    measure_costs: bool = True  # FLOPs, latency and peak memory of every candidate before it trains
    cost_repeats: int = 5  # timed forward passes per latency figure (after 2 warm-up passes)
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "max_params", "cost_repeats"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        check_hparams(self.defaults())
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device must be one of auto, cpu, cuda; got {self.device!r}")
        if self.threads is not None and (isinstance(self.threads, bool) or not isinstance(self.threads, int)
                                         or self.threads < 1):
            raise ValueError(f"threads must be None (the worker's CPU share) or an integer >= 1, got {self.threads!r}")
        if self.data_budget_mb is not None and not (isinstance(self.data_budget_mb, (int, float))
                                                    and self.data_budget_mb >= 0):
            raise ValueError(f"data_budget_mb must be None (automatic) or a number >= 0, got {self.data_budget_mb!r}")
        object.__setattr__(self, "objectives", tuple(Objectives(list(self.objectives)).to_list()))
        Constraints(max_flops=self.max_flops, max_latency_ms=self.max_latency_ms)  # a ValueError names a bad one
        if isinstance(self.loader_workers, bool) or not isinstance(self.loader_workers, int) or self.loader_workers < 0:
            raise ValueError(f"loader_workers must be an integer >= 0, got {self.loader_workers!r}")

    def defaults(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in TRIAL_HPARAMS}

    def for_trial(self, trial: Trial) -> dict[str, Any]:
        """The hyperparameters a trial trains with: these defaults, overridden by ``trial.hparams``."""
        unknown = set(trial.hparams) - set(TRIAL_HPARAMS)
        if unknown:
            raise ValueError(f"unknown hyperparameters {sorted(unknown)}; known: {sorted(TRIAL_HPARAMS)}")
        hp = self.defaults() | dict(trial.hparams)
        hp["batch_size"] = max(1, int(hp["batch_size"]))
        return check_hparams(hp)

    def check_data(self, data: Dataset) -> None:
        """Settings that cannot apply to ``data`` (augmentation on non-image inputs): a ValueError."""
        check_augmentation(self.defaults(), data.task.input_shape)


__all__ = ["TrainSettings"]
