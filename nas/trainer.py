"""Trainers: what a worker does with a trial. One trainer object lives in each worker (a Ray actor or
the in-process executor) and keeps the dataset as tensors (on the GPU where there is one) across trials.

A trainer is any object with ``run(trial, space, checkpoint) -> (Result, checkpoint_bytes | None)``,
made by a factory ``factory(data, settings)``: :class:`TorchTrainer` (the default, real PyTorch
training), :class:`ScoreTrainer` (an analytic score, for tests and toy spaces), :class:`SleepTrainer`
(for overhead benchmarks). Any failure inside ``run`` (an exception, a NaN loss, out of memory) comes
back as a FAILED result carrying the error text: a candidate never brings the search down.
"""

from __future__ import annotations

import dataclasses
import io
import math
import os
import socket
import time
import traceback
from collections.abc import Callable, Mapping
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
    The score is the last epoch's validation accuracy."""

    def __init__(self, data: Dataset, settings: TrainSettings, *, worker: str | None = None) -> None:
        self.settings = settings
        self.task = data.task
        want_cuda = settings.device == "cuda" or (settings.device == "auto" and torch.cuda.is_available())
        if want_cuda and not torch.cuda.is_available():
            raise RuntimeError("device='cuda' was asked for, but this worker sees no CUDA device")
        self.device = torch.device("cuda" if want_cuda else "cpu")
        if settings.threads is not None:
            torch.set_num_threads(settings.threads)
        # The whole dataset lives on the device once: no per-batch host copies.
        self.x_train = torch.from_numpy(np.asarray(data.x_train)).to(self.device)
        self.y_train = torch.from_numpy(np.asarray(data.y_train)).to(self.device)
        self.x_val = torch.from_numpy(np.asarray(data.x_val)).to(self.device)
        self.y_val = torch.from_numpy(np.asarray(data.y_val)).to(self.device)
        self.worker, self.node = worker_identity()
        if worker:
            self.worker = worker
        self.autocast = (
            settings.amp and self.device.type == "cuda" and torch.cuda.is_bf16_supported()
        )
        self.memory_format = (
            torch.channels_last
            if settings.channels_last and self.device.type == "cuda" and self.x_train.dim() == 4
            else torch.contiguous_format
        )
        self._warm_up()

    def _warm_up(self) -> None:
        """Pay torch's one-off costs (the first optimizer step imports a lot: ~2 s) when the worker
        starts, not inside the first trial's timing."""
        layer = torch.nn.Linear(2, 1).to(self.device)
        opt = torch.optim.Adam(layer.parameters())
        layer(torch.zeros(1, 2, device=self.device)).sum().backward()
        opt.step()

    def run(self, trial: Trial, space: SearchSpace, checkpoint: bytes | None) -> tuple[Result, bytes | None]:
        return run_safely(trial, lambda: self._train(trial, space, checkpoint), self.worker, self.node)

    def _optimizer(self, model: torch.nn.Module, hp: Mapping[str, Any]) -> torch.optim.Optimizer:
        params = model.parameters()
        if hp["optimizer"] == "sgd":
            return torch.optim.SGD(params, lr=hp["lr"], momentum=hp["momentum"],
                                   weight_decay=hp["weight_decay"])
        cls = torch.optim.AdamW if hp["optimizer"] == "adamw" else torch.optim.Adam
        return cls(params, lr=hp["lr"], weight_decay=hp["weight_decay"])

    def _train(self, trial: Trial, space: SearchSpace, checkpoint: bytes | None) -> tuple[Result, bytes]:
        s = self.settings
        hp = s.for_trial(trial)
        torch.manual_seed(s.seed * 1_000_003 + trial.trial_id)
        model = space.check_build(trial.arch, self.task)
        with torch.no_grad():  # materialise lazy modules before counting or moving parameters
            model.eval()
            model(self.x_train[:2].cpu())
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
        t0 = time.perf_counter()
        for epoch in range(start_epoch, start_epoch + epochs):
            model.train()
            order = torch.randperm(n, device=self.device)
            total, seen = 0.0, 0
            for i in range(0, n, bs):
                idx = order[i : i + bs]
                x = self.x_train[idx].contiguous(memory_format=self.memory_format)
                with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast):
                    loss = loss_fn(model(x), self.y_train[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                total += float(loss.detach()) * len(idx)
                seen += len(idx)
            train_loss = total / seen
            if not math.isfinite(train_loss):
                raise FloatingPointError(f"training loss became {train_loss} in epoch {epoch + 1}")
            val_loss, val_acc = self.evaluate(model)
            history.append({"epoch": epoch + 1, "train_loss": train_loss, "val_loss": val_loss,
                            "val_acc": val_acc})
        score = finite_score(history[-1]["val_acc"]) if history else None
        if score is None:
            raise FloatingPointError("validation accuracy is not finite")
        metrics = {**history[-1], "params": n_params, "train_seconds": time.perf_counter() - t0,
                   "samples_per_second": n * epochs / max(time.perf_counter() - t0, 1e-9),
                   "device": self.device.type, "hparams": hp}
        result = Result(trial.trial_id, TrialState.COMPLETE, score=score, metrics=metrics,
                        history=history, epoch=start_epoch + epochs)
        return result, self.checkpoint(model, opt, hp, start_epoch + epochs, trial.arch)

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module) -> tuple[float, float]:
        model.eval()
        loss_sum, correct = 0.0, 0
        for i in range(0, len(self.x_val), 2048):
            x = self.x_val[i : i + 2048].contiguous(memory_format=self.memory_format)
            y = self.y_val[i : i + 2048]
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast):
                logits = model(x)
            loss_sum += float(torch.nn.functional.cross_entropy(logits.float(), y, reduction="sum"))
            correct += int((logits.argmax(1) == y).sum())
        return loss_sum / len(self.x_val), correct / len(self.x_val)

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
