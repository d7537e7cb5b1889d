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

from nas.core.fields import option
from nas.core.objectives import Objectives
from nas.core.types import Trial, check_seed, python_numbers
from nas.train.constraints import Constraints, parse_screen
from nas.train.hparams import (
    OPTIMIZERS,
    TRIAL_HPARAMS,
    check_augmentation,
    check_hparams,
    check_settings_hparams,
)
from nas.train.schedules import SCHEDULES

if TYPE_CHECKING:
    from nas.train.data import Dataset

#: what the built-in trainer reports (names only: this module does not import torch; a test runs a trial and compares)
FIT_METRICS = ("epoch", "train_loss", "val_loss", "val_acc", "lr")  # nas.train.fit.fit, each epoch
#: the most torch CPU threads a worker may be given (torch takes a C int; no machine has more cores than this)
MAX_THREADS = 4096
RUNNER_METRICS = ("train_seconds", "epochs_trained", "samples_per_second", "threads")  # nas.train.runner
COST_METRICS = ("params", "flops", "latency_ms", "latency_batch_ms", "batch_size", "peak_memory_mb")  # costs.Costs


@dataclasses.dataclass(frozen=True)
class TrainSettings:
    """Defaults for every trial; a trial's ``hparams`` override any of
    :data:`nas.train.hparams.TRIAL_HPARAMS` by name (the optimizer and its options, the learning-rate
    schedule, label smoothing, gradient clipping, augmentation). A recipe (:mod:`nas.train.recipes`) is a
    named set of these values."""

    epochs: int = option(5, help="training epochs per trial")
    lr: float = option(1e-2, help="learning rate")
    batch_size: int = option(64, help="minibatch size")
    weight_decay: float = option(0.0, help="weight decay")
    momentum: float = option(0.9, help="momentum (SGD) or beta1 (Adam)")
    optimizer: str = option("adam", help="the optimizer", choices=OPTIMIZERS)
    nesterov: bool = option(False, help="Nesterov momentum (SGD only)")
    schedule: str = option("constant", help="learning-rate schedule: constant, cosine (to min_lr over the epochs) "
                           "or step (x gamma every step_epochs)", choices=tuple(SCHEDULES))
    warmup_epochs: float = option(0.0, help="linear warm-up of the learning rate, in epochs (any schedule)")
    min_lr: float = option(0.0, help="where the cosine schedule ends")
    step_epochs: int = option(30, help="epochs between the step schedule's steps")
    gamma: float = option(0.1, help="the step schedule's factor")
    label_smoothing: float = option(0.0, help="label smoothing of the cross-entropy loss")
    grad_clip: float | None = option(None, help="max global gradient norm (default: no clipping)")
    crop_padding: int = option(0, help="augmentation (image inputs only): random crop after this much zero padding")
    flip: bool = option(False, help="augmentation (image inputs only): random horizontal flip")
    cutout: int = option(0, help="augmentation (image inputs only): side of the cutout square; 0: off")
    data_budget_mb: float | None = option(None, help="device memory the dataset may take (default: half the free "
                                          "GPU memory)", runtime=True)
    loader_workers: int = option(2, help="DataLoader worker processes when the dataset streams from host memory",
                                 runtime=True)
    device: str = option("auto", help="where trials train: auto (CUDA when the worker has a GPU), cpu or cuda",
                         choices=("auto", "cpu", "cuda"), runtime=True)
    amp: bool = option(True, help="bf16 autocast on devices that support it", runtime=True)
    channels_last: bool = option(True, help="channels-last memory format for 4-d inputs on CUDA", runtime=True)
    threads: int | None = option(None, help="torch CPU threads per worker (default: the worker's CPU share)",
                                 runtime=True)
    max_params: int = option(50_000_000, help="constraint: candidates with more parameters are infeasible (not "
                             "trained)")
    max_flops: float | None = option(None, help="constraint: FLOPs of one forward pass of one example")
    max_latency_ms: float | None = option(None, help="constraint: median inference latency at batch 1 on the "
                                          "worker's device, in ms")
    proxy_screen: str | None = option(None, metavar="PROXY:MIN", help="constraint: a zero-cost proxy (synflow, "
                                      "snip, grad_norm, jacob_cov, naswot, params) scored on the worker before "
                                      "training; a candidate below MIN is infeasible (not trained)")
    objectives: tuple[str, ...] = option(("val_acc:max",), help="metrics and modes (nas.core.objectives); the first "
                                         "is `score`")
    measure_costs: bool = option(True, help="measure FLOPs, latency and peak memory of every candidate before it "
                                 "trains")
    cost_repeats: int = option(5, help="timed forward passes per latency figure (after 2 warm-up passes)")
    trial_timeout: float | None = option(None, help="seconds a trial may run, from its start, before it fails as "
                                         "TIMEOUT and the search goes on (Ray: its worker is stopped and replaced; "
                                         "in-process: its thread, which cannot be stopped, is left behind); default: "
                                         "no limit; a resume may change it", runtime=True)
    seed: int = option(0, help="seed of the training")

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # numpy's and torch's numbers as Python's (np.int64(3): "not an integer")
            object.__setattr__(self, f.name, python_numbers(getattr(self, f.name)))
        for name in ("epochs", "batch_size", "max_params", "cost_repeats"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        check_hparams(self.defaults())
        check_settings_hparams(self.defaults())
        check_seed(self.seed)  # (seed="1", 1.5, -1 or True was kept, then said to "differ" from the search's)
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device must be one of auto, cpu, cuda; got {self.device!r}")
        if self.threads is not None and (isinstance(self.threads, bool) or not isinstance(self.threads, int)
                                         or not 1 <= self.threads <= MAX_THREADS):  # (2**40: torch's OverflowError)
            raise ValueError(f"threads must be None (the worker's CPU share) or an integer from 1 to {MAX_THREADS}, "
                             f"got {self.threads!r}")
        if self.data_budget_mb is not None and not (isinstance(self.data_budget_mb, (int, float))
                                                    and 0 <= self.data_budget_mb < float("inf")):  # (inf: not JSON)
            raise ValueError(f"data_budget_mb must be None (automatic) or a finite number >= 0, got "
                             f"{self.data_budget_mb!r}")
        object.__setattr__(self, "objectives", tuple(Objectives(self.objectives).to_list()))
        Constraints(max_flops=self.max_flops, max_latency_ms=self.max_latency_ms)  # a ValueError names a bad one
        if self.proxy_screen is not None:
            parse_screen(self.proxy_screen)
        timeout = self.trial_timeout
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)
                                    or not 0 < timeout < float("inf")):
            raise ValueError(f"trial_timeout must be None (no limit) or a finite number of seconds > 0, "
                             f"got {timeout!r}")
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

    def reported(self) -> tuple[str, ...]:
        """The numeric metrics a trial of the built-in trainer reports under these settings, the names an
        ``--objective`` may take with it: :func:`nas.train.fit.fit`'s per-epoch ones, the trial runner's, the
        measured costs (only ``params`` where ``measure_costs`` is off; ``peak_memory_mb`` is None on a CPU) and the
        screening proxy's score; a data-parallel gang adds ``ranks``."""
        costs = COST_METRICS if self.measure_costs else ("params",)
        screen = (parse_screen(self.proxy_screen)[0],) if self.proxy_screen is not None else ()
        return tuple(dict.fromkeys(FIT_METRICS + RUNNER_METRICS + costs + screen))

    def check_data(self, data: Dataset) -> None:
        """Settings that cannot apply to ``data`` (augmentation on non-image inputs): a ValueError."""
        check_augmentation(self.defaults(), data.task.input_shape)


__all__ = ["TrainSettings"]
