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
import dataclasses
import io
import math
import os
import socket
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

import numpy as np
import torch

from nas.data import Dataset
from nas.space import SearchSpace
from nas.types import Arch, Result, Trial, TrialState, finite_score

OPTIMIZERS = ("adam", "adamw", "sgd")


@dataclasses.dataclass(frozen=True)
class TrainSettings:
    """Defaults for every trial; a trial's ``hparams`` override ``lr``, ``batch_size``,
    ``weight_decay``, ``momentum`` and ``optimizer`` by name."""

    epochs: int = 5
    lr: float = 1e-2
    batch_size: int = 64
    weight_decay: float = 0.0
    momentum: float = 0.9
    optimizer: str = "adam"
    device: str = "auto"  # "auto" (CUDA when the worker has a GPU), "cpu" or "cuda"
    amp: bool = True  # bf16 autocast on devices that support it
    channels_last: bool = True  # for 4-d inputs on CUDA
    threads: int | None = None  # torch CPU threads per worker; None: the worker's CPU share
    max_params: int = 50_000_000  # larger candidates fail at once instead of exhausting memory
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "max_params"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if not (isinstance(self.lr, (int, float)) and self.lr > 0):
            raise ValueError(f"lr must be a number > 0, got {self.lr!r}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {self.optimizer!r}; known: {', '.join(OPTIMIZERS)}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device must be one of auto, cpu, cuda; got {self.device!r}")
        if self.threads is not None and (isinstance(self.threads, bool) or not isinstance(self.threads, int)
                                         or self.threads < 1):
            raise ValueError(f"threads must be None (the worker's CPU share) or an integer >= 1, got {self.threads!r}")

    def for_trial(self, trial: Trial) -> dict[str, Any]:
        """The hyperparameters a trial trains with: these defaults, overridden by ``trial.hparams``."""
        known = {"lr", "batch_size", "weight_decay", "momentum", "optimizer"}
        unknown = set(trial.hparams) - known
        if unknown:
            raise ValueError(f"unknown hyperparameters {sorted(unknown)}; known: {sorted(known)}")
        hp = {k: getattr(self, k) for k in known} | dict(trial.hparams)
        hp["batch_size"] = max(1, int(hp["batch_size"]))
        return hp


class Trainer(Protocol):
    def run(self, trial: Trial, space: SearchSpace, checkpoint: bytes | None) -> tuple[Result, bytes | None]:
        ...


TrainerFactory = Callable[[Dataset, TrainSettings], Trainer]


def worker_identity() -> tuple[str, str]:
    return f"pid{os.getpid()}", socket.gethostname()


def run_safely(
    trial: Trial, body: Callable[[], tuple[Result, bytes | None]], worker: str, node: str
) -> tuple[Result, bytes | None]:
    """Run ``body``; any exception becomes a FAILED result with the error text. Stamps times and worker."""
    start = time.time()
    try:
        result, ckpt = body()
    except Exception as e:  # a candidate's failure is data, not a crash
        if isinstance(e, torch.OutOfMemoryError) and torch.cuda.is_available():
            torch.cuda.empty_cache()
        tb = traceback.format_exc(limit=-3)
        result, ckpt = Result.failed(trial.trial_id, f"{type(e).__name__}: {e}\n{tb}"), None
    result.start_time, result.end_time = start, time.time()
    result.worker, result.node = worker, node
    return result, ckpt


class TorchTrainer:
    """Real training: ``space.build(arch)``, the trial's optimizer and hparams, ``epochs`` epochs of
    minibatch SGD on the training split, accuracy on the validation split after every epoch.
    The score is the last epoch's validation accuracy.

    Speed: the dataset is copied to the device once, when the trainer starts; minibatches are index
    gathers on the device (no DataLoader, no per-batch host copy); the loss is summed on the device and
    read once per epoch (one host sync per epoch, not per step); optimizers use their fused kernels.
    On CUDA: bf16 autocast where the GPU supports it (``amp``), TF32 matmuls, cuDNN autotuning and
    channels-last convolutions. On CPU: ``threads`` torch threads while a trial runs (a Ray actor already
    runs at its CPU share). Process-wide torch flags are set for a trial and restored after it.

    >>> from nas.data import load_dataset
    >>> from nas.search_spaces.macro import MacroSpace
    >>> arch = {"depth": 1, "width_0": 16, "width_1": 16, "width_2": 16, "kernel_0": 3, "kernel_1": 3,
    ...         "kernel_2": 3, "activation": "relu", "norm": "batch", "dropout": 0.0}
    >>> trainer = TorchTrainer(load_dataset("digits"), TrainSettings(epochs=1, device="cpu", threads=1))
    >>> result, checkpoint = trainer.run(Trial(0, arch), MacroSpace(), None)
    >>> result.ok, result.metrics["device"], len(result.history)
    (True, 'cpu', 1)
    """

    eval_batch_size = 2048

    def __init__(self, data: Dataset, settings: TrainSettings, *, worker: str | None = None) -> None:
        self.settings = settings
        self.task = data.task
        want_cuda = settings.device == "cuda" or (settings.device == "auto" and torch.cuda.is_available())
        if want_cuda and not torch.cuda.is_available():
            raise RuntimeError("device='cuda' was asked for, but this worker sees no CUDA device")
        self.device = torch.device("cuda" if want_cuda else "cpu")
        cuda = self.device.type == "cuda"
        x_train = torch.from_numpy(np.asarray(data.x_train))
        self.memory_format = (
            torch.channels_last if settings.channels_last and cuda and x_train.dim() == 4 else torch.contiguous_format
        )
        # The whole dataset lives on the device once: no per-batch host copies. Stored channels-last
        # where that applies, so that every gathered minibatch already is.
        self.x_train = x_train.to(self.device).contiguous(memory_format=self.memory_format)
        self.y_train = torch.from_numpy(np.asarray(data.y_train)).to(self.device)
        self.x_val = torch.from_numpy(np.asarray(data.x_val)).to(self.device).contiguous(
            memory_format=self.memory_format)
        self.y_val = torch.from_numpy(np.asarray(data.y_val)).to(self.device)
        self._probe = x_train[:2].clone()  # on the host: materialises lazy modules without a device sync
        self.worker, self.node = worker_identity()
        if worker:
            self.worker = worker
        self.autocast = settings.amp and cuda and torch.cuda.is_bf16_supported()
        with self._torch_flags():
            self._warm_up()

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

    def run(self, trial: Trial, space: SearchSpace, checkpoint: bytes | None) -> tuple[Result, bytes | None]:
        def body() -> tuple[Result, bytes | None]:
            with self._torch_flags():
                return self._train(trial, space, checkpoint)

        return run_safely(trial, body, self.worker, self.node)

    @staticmethod
    def _optimizer(model: torch.nn.Module, hp: Mapping[str, Any]) -> torch.optim.Optimizer:
        """The trial's optimizer with its fused kernel (CPU and CUDA; one kernel for all parameters
        instead of a loop over them: on CPU, 10x faster steps for a small network)."""
        params = [p for p in model.parameters() if p.requires_grad]
        fused = bool(params) and all(p.is_floating_point() for p in params)
        if hp["optimizer"] == "sgd":
            return torch.optim.SGD(params, lr=hp["lr"], momentum=hp["momentum"],
                                   weight_decay=hp["weight_decay"], fused=fused or None)
        cls = torch.optim.AdamW if hp["optimizer"] == "adamw" else torch.optim.Adam
        return cls(params, lr=hp["lr"], weight_decay=hp["weight_decay"], fused=fused or None)

    def _train(self, trial: Trial, space: SearchSpace, checkpoint: bytes | None) -> tuple[Result, bytes]:
        s = self.settings
        hp = s.for_trial(trial)
        torch.manual_seed(s.seed * 1_000_003 + trial.trial_id)
        model = space.check_build(trial.arch, self.task)
        if any(torch.nn.parameter.is_lazy(p) for p in model.parameters()):
            with torch.no_grad():  # materialise lazy modules before counting or moving parameters
                model.eval()
                model(self._probe)
        n_params = sum(p.numel() for p in model.parameters())
        if n_params > s.max_params:
            raise MemoryError(f"model has {n_params:,} parameters, over max_params={s.max_params:,}")
        model = model.to(self.device, memory_format=self.memory_format)  # type: ignore[call-overload]
        opt = self._optimizer(model, hp)
        start_epoch = 0
        if checkpoint is not None:
            state = torch.load(io.BytesIO(checkpoint), map_location=self.device, weights_only=False)
            model.load_state_dict(state["model"])
            if state.get("optimizer_name") == hp["optimizer"]:
                opt.load_state_dict(state["optimizer"])
            for group in opt.param_groups:  # explored hparams win over the copied optimizer's
                group["lr"] = hp["lr"]
                group["weight_decay"] = hp["weight_decay"]
            start_epoch = int(state["epoch"])
        epochs = trial.epochs or s.epochs
        history = []
        loss_fn = torch.nn.CrossEntropyLoss()
        n = len(self.x_train)
        bs = min(hp["batch_size"], n)
        end = n - 1 if n > 1 and n % bs == 1 else n  # a last batch of one sample cannot train BatchNorm
        t0 = time.perf_counter()
        for epoch in range(start_epoch, start_epoch + epochs):
            model.train()
            order = torch.randperm(n, device=self.device)
            total = torch.zeros((), device=self.device)  # summed on the device: no sync per step
            for i in range(0, end, bs):
                idx = order[i : min(i + bs, end)]
                with self._autocast():
                    loss = loss_fn(model(self.x_train[idx]), self.y_train[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                total.add_(loss.detach().float(), alpha=len(idx))
            train_loss = float(total) / end
            if not math.isfinite(train_loss):
                raise FloatingPointError(f"training loss became {train_loss} in epoch {epoch + 1}")
            val_loss, val_acc = self.evaluate(model)
            history.append({"epoch": epoch + 1, "train_loss": train_loss, "val_loss": val_loss,
                            "val_acc": val_acc})
        train_seconds = time.perf_counter() - t0
        score = finite_score(history[-1]["val_acc"]) if history else None
        if score is None:
            raise FloatingPointError("validation accuracy is not finite")
        metrics = {**history[-1], "params": n_params, "train_seconds": train_seconds,
                   "samples_per_second": end * epochs / max(train_seconds, 1e-9),
                   "device": self.device.type, "threads": torch.get_num_threads(), "hparams": hp}
        result = Result(trial.trial_id, TrialState.COMPLETE, score=score, metrics=metrics,
                        history=history, epoch=start_epoch + epochs)
        return result, self.checkpoint(model, opt, hp, start_epoch + epochs, trial.arch)

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module) -> tuple[float, float]:
        """Validation loss and accuracy, summed on the device and read once."""
        model.eval()
        loss_sum = torch.zeros((), device=self.device)
        correct = torch.zeros((), dtype=torch.int64, device=self.device)
        for i in range(0, len(self.x_val), self.eval_batch_size):
            x = self.x_val[i : i + self.eval_batch_size]
            y = self.y_val[i : i + self.eval_batch_size]
            with self._autocast():
                logits = model(x)
            loss_sum += torch.nn.functional.cross_entropy(logits.float(), y, reduction="sum")
            correct += (logits.argmax(1) == y).sum()
        loss, right = torch.stack([loss_sum, correct.double()]).tolist()  # one device sync
        return loss / len(self.x_val), int(right) / len(self.x_val)

    @staticmethod
    def checkpoint(model: torch.nn.Module, opt: torch.optim.Optimizer, hp: Mapping[str, Any], epoch: int,
                   arch: Arch) -> bytes:
        buf = io.BytesIO()
        state = {"model": {k: v.cpu() for k, v in model.state_dict().items()},
                 "optimizer": opt.state_dict(), "optimizer_name": hp["optimizer"], "epoch": epoch,
                 "arch": dict(arch), "hparams": dict(hp)}
        torch.save(state, buf)
        return buf.getvalue()


class ScoreTrainer:
    """Scores each architecture with a function (``score_fn(arch) -> float``) instead of training:
    for spaces with a known objective, tests, and strategy studies. Failures are handled as in real
    training (an exception or a non-finite score makes a FAILED trial)."""

    def __init__(self, data: Dataset | None, settings: TrainSettings | None, *,
                 score_fn: Callable[[Arch], float]) -> None:
        self.score_fn = score_fn
        self.worker, self.node = worker_identity()

    def run(self, trial: Trial, space: SearchSpace, checkpoint: bytes | None) -> tuple[Result, bytes | None]:
        def body() -> tuple[Result, bytes | None]:
            space.validate(trial.arch)
            score = finite_score(self.score_fn(trial.arch))
            if score is None:
                raise FloatingPointError(f"score is not finite for {space.format(trial.arch)}")
            return Result(trial.trial_id, TrialState.COMPLETE, score=score, epoch=1,
                          metrics={"score": score}), None

        return run_safely(trial, body, self.worker, self.node)


class SleepTrainer:
    """Returns a fixed score after ``seconds`` of sleep (0: at once): the per-trial overhead probe."""

    def __init__(self, data: Dataset | None, settings: TrainSettings | None, *, seconds: float = 0.0) -> None:
        self.seconds = seconds
        self.worker, self.node = worker_identity()

    def run(self, trial: Trial, space: SearchSpace, checkpoint: bytes | None) -> tuple[Result, bytes | None]:
        def body() -> tuple[Result, bytes | None]:
            if self.seconds:
                time.sleep(self.seconds)
            return Result(trial.trial_id, TrialState.COMPLETE, score=0.0, epoch=1), None

        return run_safely(trial, body, self.worker, self.node)
