"""Trainers: what a worker does with a trial. One trainer object lives in each worker (a Ray actor or
the in-process executor) and keeps the dataset as tensors (on the GPU where there is one) across trials.

A trainer is any object with ``run(trial, space, checkpoint) -> (Result, checkpoint_bytes | None)``,
made by a factory ``factory(data, settings)``: :class:`TorchTrainer` (the default, real PyTorch
training), :class:`ScoreTrainer` (an analytic score, for tests and toy spaces), :class:`SleepTrainer`
(for overhead benchmarks). Any failure inside ``run`` (an exception, a NaN loss, out of memory) comes
back as a FAILED result carrying the error text: a candidate never brings the search down.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import logging
import os
import socket
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import numpy as np
import torch

from nas.core.objectives import Objectives
from nas.core.space import SearchSpace
from nas.core.types import Arch, FailureKind, Result, Trial, TrialState, finite_score
from nas.train.context import CheckpointIO, Report, TrialContext, TrialFailure
from nas.train.costs import Constraints, measure_costs
from nas.train.data import Dataset
from nas.train.feed import DeviceFeed, StreamFeed, data_bytes, device_budget
from nas.train.fit import fit
from nas.train.hparams import OPTIMIZERS as OPTIMIZERS  # re-exported: where callers look for it
from nas.train.hparams import (
    check_augmentation,
    make_optimizer,
)
from nas.train.settings import TrainSettings as TrainSettings  # re-exported: where callers look for it

log = logging.getLogger(__name__)



class Trainer(Protocol):
    """What a worker runs trials with. ``report`` (epoch, metrics, score) -> Decision carries each epoch's
    report out as it happens; ``inherit``: a checkpoint to inherit tensors from; ``keep``: whether the
    trial's checkpoint comes back (a bool, or a test of its Result)."""

    def run(self, trial: Trial, space: SearchSpace, checkpoint: bytes | None, *, report: Report | None = None,
            inherit: bytes | None = None, keep: bool | Callable[[Result], bool] = True,
            ) -> tuple[Result, bytes | None]:
        ...


TrainerFactory = Callable[[Dataset, TrainSettings], Trainer]


def run_trainer(trainer: Any, trial: Trial, space: SearchSpace, checkpoint: bytes | None, *,
                report: Report | None = None, inherit: bytes | None = None,
                keep: bool | Callable[[Result], bool] = True) -> tuple[Result, bytes | None]:
    """``trainer.run`` with the keywords it takes: a trainer written before reports existed (``run(trial,
    space, checkpoint)``) still runs; it just reports nothing."""
    params = _run_params(type(trainer))
    given = {"report": report, "inherit": inherit, "keep": keep}
    kwargs = given if params is None else {k: v for k, v in given.items() if k in params}
    return trainer.run(trial, space, checkpoint, **kwargs)  # type: ignore[no-any-return]


def trainer_reports(trainer: Any) -> bool:
    """Whether ``trainer`` sends reports (else executors run it without a reporting thread)."""
    params = _run_params(type(trainer))
    return bool(getattr(trainer, "reports", True)) and (params is None or "report" in params)


_RUN_PARAMS: dict[Any, frozenset[str] | None] = {}


def _run_params(cls: Any) -> frozenset[str] | None:
    """The keyword names ``cls.run`` takes (None: any, it has ``**kwargs``); looked up once per class."""
    if cls not in _RUN_PARAMS:
        sig = inspect.signature(cls.run)
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values())
        _RUN_PARAMS[cls] = None if takes_any else frozenset(sig.parameters)
    return _RUN_PARAMS[cls]


def worker_identity() -> tuple[str, str]:
    return f"pid{os.getpid()}", socket.gethostname()


def failure_kind(e: BaseException) -> FailureKind:
    """The typed reason of a trial that raised ``e``."""
    if isinstance(e, TrialFailure):
        return e.kind
    if isinstance(e, torch.OutOfMemoryError | MemoryError):
        return FailureKind.OOM
    if isinstance(e, FloatingPointError):
        return FailureKind.NAN
    return FailureKind.ERROR


def run_safely(
    trial: Trial, body: Callable[[], tuple[Result, bytes | None]], worker: str, node: str
) -> tuple[Result, bytes | None]:
    """Run ``body``; any exception becomes a FAILED result with the error text and its typed reason
    (:func:`failure_kind`). Stamps times and worker."""
    start = time.time()
    try:
        result, ckpt = body()
    except Exception as e:  # a candidate's failure is data, not a crash
        if isinstance(e, torch.OutOfMemoryError) and torch.cuda.is_available():
            torch.cuda.empty_cache()
        kind = failure_kind(e)
        if isinstance(e, TrialFailure):  # an expected failure: its one line says it all
            result = Result.failed(trial.trial_id, f"{kind.value}: {e}", kind, metrics=e.metrics)
        else:
            tb = traceback.format_exc(limit=-3)
            result = Result.failed(trial.trial_id, f"{type(e).__name__}: {e}\n{tb}", kind)
        ckpt = None
    result.start_time, result.end_time = start, time.time()
    result.worker, result.node = worker, node
    return result, ckpt


def inherit_into(model: torch.nn.Module, data: bytes, device: torch.device,
                 parent: int | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Copy into ``model`` every tensor of the checkpoint ``data`` whose name and shape it shares (weight
    inheritance, :mod:`nas.train.inherit`): the metrics that record it, and the parent's state (its
    optimizer state, for the training function to take what fits)."""
    from nas.train.inherit import inherit_weights

    state = torch.load(io.BytesIO(data), map_location=device, weights_only=True)
    stats = inherit_weights(model, state["model"])
    return stats.metrics(parent=parent), state


class TorchTrainer:
    """Real training: ``space.build(arch)``, the trial's optimizer, learning-rate schedule, label smoothing,
    gradient clipping and augmentation, ``epochs`` epochs of minibatch SGD on the training split, accuracy on
    the validation split after every epoch. The score is the last epoch's validation accuracy.

    Speed: the dataset is copied to the device once, when the trainer starts (uint8 images stay uint8 there,
    normalised per channel on the fly with the training split's mean and std); minibatches are index
    gathers on the device, augmented there in batched torch ops (no DataLoader, no per-batch host copy).
    Where the dataset exceeds ``data_budget_mb`` (default: half the GPU's free memory), it stays in host
    memory and a DataLoader with ``loader_workers`` processes streams it instead: the trainer logs so and
    each result's ``data_path`` metric says ``streaming`` (else ``device``). The loss is summed on the
    device and read once per epoch; optimizers use their fused kernels. On CUDA: bf16 autocast where the GPU
    supports it (``amp``), TF32 matmuls, cuDNN autotuning and channels-last convolutions. On CPU:
    ``threads`` torch threads while a trial runs. Process-wide torch flags are set for a trial and restored.

    >>> from nas.train.data import load_dataset
    >>> from nas.search_spaces.macro import MacroSpace
    >>> arch = {"depth": 1, "width_0": 16, "width_1": 16, "width_2": 16, "kernel_0": 3, "kernel_1": 3,
    ...         "kernel_2": 3, "activation": "relu", "norm": "batch", "dropout": 0.0}
    >>> trainer = TorchTrainer(load_dataset("digits"), TrainSettings(epochs=1, device="cpu", threads=1))
    >>> result, checkpoint = trainer.run(Trial(0, arch), MacroSpace(), None)
    >>> result.ok, result.metrics["device"], result.metrics["data_path"], len(result.history)
    (True, 'cpu', 'device', 1)
    """

    eval_batch_size = 2048

    def __init__(self, data: Dataset, settings: TrainSettings, *, worker: str | None = None,
                 train_fn: Callable[[TrialContext], Any] | None = None) -> None:
        self.settings = settings
        self.train_fn = train_fn or fit
        self.objectives = Objectives(list(settings.objectives))
        self.constraints = Constraints(max_flops=settings.max_flops, max_latency_ms=settings.max_latency_ms)
        self.task = data.task
        settings.check_data(data)
        want_cuda = settings.device == "cuda" or (settings.device == "auto" and torch.cuda.is_available())
        if want_cuda and not torch.cuda.is_available():
            raise RuntimeError("device='cuda' was asked for, but this worker sees no CUDA device")
        self.device = torch.device("cuda" if want_cuda else "cpu")
        cuda = self.device.type == "cuda"
        x_train = np.asarray(data.x_train)
        self.memory_format = (
            torch.channels_last if settings.channels_last and cuda and x_train.ndim == 4 else torch.contiguous_format
        )
        arrays = (x_train, np.asarray(data.y_train), np.asarray(data.x_val), np.asarray(data.y_val))
        size, budget = data_bytes(*arrays), device_budget(self.device, settings.data_budget_mb)
        self.feed: DeviceFeed
        if size <= budget:
            # The whole dataset lives on the device once, stored channels-last where that applies, so that
            # every gathered minibatch already is.
            self.feed = DeviceFeed(*arrays, self.device, self.memory_format)
        else:
            self.feed = StreamFeed(*arrays, self.device, self.memory_format, workers=settings.loader_workers)
            log.warning("dataset %s (%.0f MiB) exceeds the device data budget (%.0f MiB): streaming it from host "
                        "memory with %d DataLoader workers", data.name, size / 2**20, budget / 2**20,
                        settings.loader_workers)
        self._probe = self.feed.prepare(torch.from_numpy(x_train[:2].copy()).to(self.device)).cpu()
        self.worker, self.node = worker_identity()
        if worker:
            self.worker = worker
        self.autocast = settings.amp and cuda and torch.cuda.is_bf16_supported()
        with self._torch_flags():
            self._warm_up()

    # the device-resident tensors (a streaming feed has none: the data stays in host memory)
    x_train = property(lambda self: self.feed.x_train)
    y_train = property(lambda self: self.feed.y_train)
    x_val = property(lambda self: self.feed.x_val)
    y_val = property(lambda self: self.feed.y_val)

    @contextlib.contextmanager
    def _torch_flags(self) -> Iterator[None]:
        """Thread count (CPU) and cuDNN autotuning + TF32 matmuls (CUDA) for the duration of a trial."""
        threads = torch.get_num_threads()
        benchmark, precision = torch.backends.cudnn.benchmark, torch.get_float32_matmul_precision()
        if self.settings.threads is not None:
            torch.set_num_threads(self.settings.threads)
        if self.device.type == "cuda":
            torch.backends.cudnn.benchmark = True  # a search trains the same shapes over and over
            torch.set_float32_matmul_precision("high")  # TF32 on Ampere and later for the fp32 paths
        try:
            yield
        finally:
            if torch.get_num_threads() != threads:
                torch.set_num_threads(threads)
            torch.backends.cudnn.benchmark = benchmark
            torch.set_float32_matmul_precision(precision)

    def _warm_up(self) -> None:
        """Pay torch's one-off costs (the first optimizer step imports a lot: ~2 s; CUDA context and
        kernels) when the worker starts, not inside the first trial's timing."""
        layer = torch.nn.Linear(2, 1).to(self.device)
        opt = torch.optim.Adam(layer.parameters(), fused=True)
        with self._autocast():
            out = layer(torch.zeros(1, 2, device=self.device)).float().sum()
        out.backward()
        opt.step()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.autocast:
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def run(self, trial: Trial, space: SearchSpace, checkpoint: bytes | None, *, report: Report | None = None,
            inherit: bytes | None = None, keep: bool | Callable[[Result], bool] = True) -> tuple[Result, bytes | None]:
        """Train ``trial`` (from ``checkpoint`` if given; inheriting tensors from the ``inherit`` checkpoint if
        given) with the training function, sending each epoch's report to ``report``. Its checkpoint comes back
        where ``keep`` says (a bool, or a test of the Result) or the trial paused; else None."""
        def body() -> tuple[Result, bytes | None]:
            with self._torch_flags():
                return self._run(trial, space, checkpoint, report, inherit, keep)

        return run_safely(trial, body, self.worker, self.node)

    _optimizer = staticmethod(make_optimizer)

    def build(self, arch: Arch, space: SearchSpace) -> tuple[torch.nn.Module, int]:
        """The candidate on the device (lazy modules materialised) and its parameter count."""
        model = space.check_build(arch, self.task)
        if any(torch.nn.parameter.is_lazy(p) for p in model.parameters()):
            with torch.no_grad():  # materialise lazy modules before counting or moving parameters
                model.eval()
                model(self._probe)
        n_params = sum(p.numel() for p in model.parameters())
        return model.to(self.device, memory_format=self.memory_format), n_params  # type: ignore[call-overload]

    def measure(self, model: torch.nn.Module, n_params: int, batch_size: int) -> dict[str, Any]:
        """The model's costs on this worker's device (:func:`nas.train.costs.measure_costs`), or only its
        parameters where ``measure_costs`` is off."""
        if not self.settings.measure_costs:
            return {"params": n_params}
        costs = measure_costs(model, tuple(self._probe.shape[1:]), device=self.device, batch_size=batch_size,
                              warmup=2, repeats=self.settings.cost_repeats, autocast=self.autocast,
                              memory_format=self.memory_format)
        return costs.to_dict()

    def _run(self, trial: Trial, space: SearchSpace, checkpoint: bytes | None, report: Report | None,
             inherit: bytes | None, keep: bool | Callable[[Result], bool]) -> tuple[Result, bytes | None]:
        s = self.settings
        hp = s.for_trial(trial)
        check_augmentation(hp, self.task.input_shape)
        torch.manual_seed(s.seed * 1_000_003 + trial.trial_id)
        model, n_params = self.build(trial.arch, space)
        if n_params > s.max_params:  # before anything else is measured: it may not even fit a forward pass
            raise TrialFailure(FailureKind.INFEASIBLE, f"params {n_params:,} > max_params {s.max_params:,}",
                               {"params": n_params})
        costs = self.measure(model, n_params, hp["batch_size"])
        violation = self.constraints.check(costs) if self.constraints.active else None
        if violation is not None:  # recorded at once; nothing is trained
            raise TrialFailure(FailureKind.INFEASIBLE, str(violation), costs)
        measured: dict[str, Any] = {}
        inherited = None
        if inherit is not None:
            found, inherited = inherit_into(model, inherit, self.device, trial.inherit_from)
            measured.update(found)
        ckpt_io = CheckpointIO(checkpoint, self.device)
        if (norm := self.normalization()) is not None:
            ckpt_io.extra["normalization"] = norm
        ctx = TrialContext(trial, model=model, data=self.feed, hparams=hp, device=self.device, costs=costs,
                           checkpoint=ckpt_io, report=report, objectives=self.objectives, default_epochs=s.epochs,
                           total_epochs=s.epochs, evaluate=self.evaluate, autocast=self._autocast)
        ctx.inherited = inherited
        t0 = time.perf_counter()
        returned = self.train_fn(ctx)
        train_seconds = time.perf_counter() - t0
        epochs = len(ctx.history)
        measured.update({
            "train_seconds": train_seconds, "epochs_trained": epochs,
            "samples_per_second": self.feed.train_samples(hp["batch_size"]) * epochs / max(train_seconds, 1e-9),
            "device": self.device.type, "threads": torch.get_num_threads(), "hparams": hp,
            "data_path": "streaming" if self.feed.streaming else "device"})
        return ctx.outcome(returned, measured=measured, keep_checkpoint=keep)

    def normalization(self) -> dict[str, list[float]] | None:
        """The per-channel mean and std (pixel units) the inputs are normalised with; None for float data."""
        norm = self.feed.normalize
        return None if norm is None else {"mean": norm.mean, "std": norm.std}

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module) -> tuple[float, float]:
        """Validation loss and accuracy, summed on the device and read once."""
        model.eval()
        loss_sum = torch.zeros((), device=self.device)
        correct = torch.zeros((), dtype=torch.int64, device=self.device)
        for x, y in self.feed.val_batches(self.eval_batch_size):
            with self._autocast():
                logits = model(x)
            loss_sum += torch.nn.functional.cross_entropy(logits.float(), y, reduction="sum")
            correct += (logits.argmax(1) == y).sum()
        loss, right = torch.stack([loss_sum, correct.double()]).tolist()  # one device sync
        return loss / self.feed.n_val, int(right) / self.feed.n_val


class ScoreTrainer:
    """Scores each architecture with a function (``score_fn(arch) -> float``) instead of training:
    for spaces with a known objective, tests, and strategy studies. Failures are handled as in real
    training (an exception or a non-finite score makes a FAILED trial)."""

    reports = False  # one score, no epochs: executors run it without a reporting thread

    def __init__(self, data: Dataset | None, settings: TrainSettings | None, *,
                 score_fn: Callable[[Arch], float]) -> None:
        self.score_fn = score_fn
        self.worker, self.node = worker_identity()

    def run(self, trial: Trial, space: SearchSpace, checkpoint: bytes | None, **_: Any) -> tuple[Result, bytes | None]:
        def body() -> tuple[Result, bytes | None]:
            space.validate(trial.arch)
            score = finite_score(self.score_fn(trial.arch))
            if score is None:
                raise FloatingPointError(f"score is not finite for {space.format(trial.arch)}")
            return Result(trial.trial_id, TrialState.COMPLETE, score=score, scores=[score], epoch=1,
                          metrics={"score": score}), None

        return run_safely(trial, body, self.worker, self.node)


class SleepTrainer:
    """Returns a fixed score after ``seconds`` of sleep (0: at once): the per-trial overhead probe."""

    reports = False

    def __init__(self, data: Dataset | None, settings: TrainSettings | None, *, seconds: float = 0.0) -> None:
        self.seconds = seconds
        self.worker, self.node = worker_identity()

    def run(self, trial: Trial, space: SearchSpace, checkpoint: bytes | None, **_: Any) -> tuple[Result, bytes | None]:
        def body() -> tuple[Result, bytes | None]:
            if self.seconds:
                time.sleep(self.seconds)
            return Result(trial.trial_id, TrialState.COMPLETE, score=0.0, scores=[0.0], epoch=1), None

        return run_safely(trial, body, self.worker, self.node)
