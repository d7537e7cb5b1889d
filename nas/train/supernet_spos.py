"""Single-path one-shot training of a supernet (Guo et al. 2020, "Single Path One-Shot Neural Architecture Search
with Uniform Sampling", ECCV, Eq. 5): every training step samples a path of the supernet and trains only its
weights, so that every sub-network is trained a little and none is preferred.

:class:`PathSampler` says which paths a step trains:

- ``uniform`` (SPOS): one path per step, every decision drawn uniformly at random;
- ``fair`` (Chu et al. 2021, "FairNAS", strict fairness): ``m`` paths per step, ``m`` the most options a
  decision has; each decision takes each of its options once among them (a decision with fewer options draws
  the rest of its ``m`` at random), and their gradients are summed into one update;
- ``sandwich`` (Yu & Huang 2019, "Universally Slimmable Networks", the sandwich rule): the largest and the
  smallest path (:meth:`nas.core.weight_sharing.Supernet.extremes`, keeping a random path's unordered decisions) and
  two random paths per step, gradients summed into one update; refused for a supernet with no sizes.

:class:`SPOSTrainer` trains epochs of that over a :class:`nas.train.feed.DeviceFeed` (the data on the device) with
the run's optimizer, schedule, label smoothing, clipping and augmentation (:mod:`nas.train.hparams`). Its
:meth:`SPOSTrainer.state_dict` holds everything the next epoch depends on (weights, optimizer, the sampler's
and torch's random states, the step), so a run resumed from it trains exactly as one that never stopped.
Where that state is kept is not this module's business (:mod:`nas.run.supernet_store`).

>>> import numpy as np, torch
>>> from nas.core.space import Task
>>> from nas.search_spaces.macro import MacroSpace
>>> from nas.train.feed import DeviceFeed
>>> from nas.train.settings import TrainSettings
>>> rng = np.random.default_rng(0)
>>> x, y = rng.normal(size=(64, 6)).astype(np.float32), rng.integers(0, 2, 64)
>>> feed = DeviceFeed(x[:48], y[:48], x[48:], y[48:], torch.device("cpu"))
>>> space = MacroSpace()
>>> trainer = SPOSTrainer(space.supernet(Task((6,), 2)), feed, TrainSettings(batch_size=16).defaults(),
...                       epochs=2, sampling="fair", seed=0)
>>> first = trainer.train_epoch()
>>> trainer.epoch, first["steps"], first["paths"]
(1, 3, 9)
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from nas.core.weight_sharing import Supernet
from nas.train.feed import DeviceFeed
from nas.train.hparams import augmentation, check_hparams, make_optimizer, make_schedule
from nas.train.shard import ShardedFeed

SAMPLINGS = ("uniform", "fair", "sandwich")
SANDWICH_RANDOM = 2  # random paths per sandwich step, besides the largest and the smallest (as US-Nets)


class PathSampler:
    """The paths each training step trains (see the module's docstring), drawn from one seeded generator."""

    def __init__(self, supernet: Supernet, kind: str = "uniform", *, seed: int = 0) -> None:
        if kind not in SAMPLINGS:
            raise ValueError(f"unknown sampling {kind!r}; known: {', '.join(SAMPLINGS)}")
        space = supernet.space
        if kind == "sandwich" and supernet.extremes(space.sample(np.random.default_rng(0))) is None:
            raise ValueError(f"sampling 'sandwich' needs a supernet whose paths have sizes (a largest and a "
                             f"smallest); {type(supernet).__name__} of space {space!r} has none: use uniform or fair")
        self.supernet, self.space, self.kind = supernet, space, kind
        self.rng = np.random.default_rng(seed)

    def paths(self) -> list[dict[str, Any]]:
        if self.kind == "uniform":
            return [self.space.sample(self.rng)]
        if self.kind == "sandwich":
            largest, smallest = self.supernet.extremes(self.space.sample(self.rng)) or ({}, {})
            return [largest, smallest, *(self.space.sample(self.rng) for _ in range(SANDWICH_RANDOM))]
        decisions = self.space.decisions
        m = max(len(o) for o in decisions.values())
        columns = {}
        for name, options in decisions.items():
            picks = list(range(len(options))) + self.rng.integers(len(options), size=m - len(options)).tolist()
            columns[name] = [options[i] for i in self.rng.permutation(picks)]
        return [{name: columns[name][j] for name in decisions} for j in range(m)]

    def state_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("kind") != self.kind:
            raise ValueError(f"the saved sampler is {state.get('kind')!r}, this run samples {self.kind!r}")
        self.rng.bit_generator.state = state["rng"]


class SPOSTrainer:
    """Trains ``supernet`` on ``feed`` for ``epochs`` epochs with ``hparams`` (a resolved
    :meth:`nas.train.settings.TrainSettings.defaults`), sampling paths by ``sampling``. ``autocast``: the device's
    mixed-precision context (:meth:`nas.train.device.DeviceSide.autocast`).

    Data-parallel (rank ``rank`` of ``world``, :mod:`nas.engine.supernet_actor`): each epoch the rank trains its
    shard of the epoch's permutation (:class:`nas.train.shard.ShardedFeed`, drawn from ``seed`` and the epoch, so
    one process, ``world=1``, trains the same order on every path), ``forward`` is the DistributedDataParallel
    wrapper of ``supernet`` that averages the gradients, and every rank, its sampler seeded alike, trains the same
    paths in the same step."""

    def __init__(self, supernet: Supernet, feed: DeviceFeed, hparams: Mapping[str, Any], *, epochs: int,
                 sampling: str = "uniform", seed: int = 0, autocast: Callable[[], Any] | None = None,
                 rank: int = 0, world: int = 1, forward: torch.nn.Module | None = None) -> None:
        if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
            raise ValueError(f"epochs must be an integer >= 1, got {epochs!r}")
        self.supernet, self.feed, self.hp = supernet, feed, check_hparams(hparams)
        self.forward = forward if forward is not None else supernet
        self.shards = ShardedFeed(feed, rank=rank, world=world, seed=seed)
        self.sampler = PathSampler(supernet, sampling, seed=seed)
        self.opt = make_optimizer(supernet, self.hp)
        if isinstance(self.opt, torch.optim.SGD):  # fused SGD refuses the missing momentum of paths not yet trained
            for group in self.opt.param_groups:
                group["fused"], group["foreach"] = None, True
        self.loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=self.hp["label_smoothing"])
        self.augment = augmentation(self.hp)
        bs = self.hp["batch_size"]
        self.steps_per_epoch = -(-self.shards.train_samples(bs) // min(bs, self.shards.n_train))
        self.epochs = epochs
        self.schedule = make_schedule(self.hp, self.steps_per_epoch, epochs)
        self.autocast = autocast
        self.epoch = 0  # epochs trained
        self.step = 0  # optimizer steps taken

    def train_epoch(self) -> dict[str, Any]:
        """One epoch; its figures (``train_loss`` and ``train_acc`` over the paths trained, ``lr``, ``steps``,
        ``paths``, ``samples``: the training rows this rank saw, ``seconds``)."""
        import contextlib

        model, hp, device = self.forward, self.hp, self.feed.device
        self.supernet.train()
        t0 = time.perf_counter()
        loss_sum = torch.zeros((), device=device)
        correct = torch.zeros((), dtype=torch.int64, device=device)
        seen = paths = steps = rows = 0
        lr = hp["lr"]
        params = [p for p in self.supernet.parameters() if p.requires_grad]
        for x, y in self.shards.train_batches(hp["batch_size"], self.augment):
            lr = self.schedule.lr(self.step)
            for group in self.opt.param_groups:
                group["lr"] = lr
            self.opt.zero_grad(set_to_none=True)
            for arch in self.sampler.paths():
                with self.autocast() if self.autocast is not None else contextlib.nullcontext():
                    logits = model(x, arch)
                    loss = self.loss_fn(logits, y)
                loss.backward()  # summed over the step's paths (FairNAS, the sandwich rule)
                loss_sum += loss.detach().float() * len(y)
                correct += (logits.detach().argmax(1) == y).sum()
                seen += len(y)
                paths += 1
            if hp["grad_clip"] is not None:
                torch.nn.utils.clip_grad_norm_(params, hp["grad_clip"], foreach=True)
            self.opt.step()
            self.step += 1
            steps += 1
            rows += len(y)
        loss_value, right = torch.stack([loss_sum, correct.double()]).tolist()  # one device sync
        train_loss = loss_value / max(seen, 1)
        if not math.isfinite(train_loss):
            raise FloatingPointError(f"supernet training loss became {train_loss} in epoch {self.epoch + 1}")
        self.epoch += 1
        return {"epoch": self.epoch, "train_loss": train_loss, "train_acc": right / max(seen, 1), "lr": lr,
                "steps": steps, "paths": paths, "samples": rows, "seconds": time.perf_counter() - t0}

    def state_dict(self) -> dict[str, Any]:
        """Everything the next epoch depends on, as tensors and plain data (on the CPU)."""
        state: dict[str, Any] = {
            "model": {k: v.detach().cpu() for k, v in self.supernet.state_dict().items()},
            "optimizer": _to_cpu(self.opt.state_dict()), "sampler": self.sampler.state_dict(),
            "torch_rng": torch.get_rng_state(), "epoch": self.epoch, "step": self.step}
        if self.feed.device.type == "cuda":
            state["cuda_rng"] = torch.cuda.get_rng_state(self.feed.device)
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.supernet.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])
        self.sampler.load_state_dict(state["sampler"])
        torch.set_rng_state(state["torch_rng"])
        if self.feed.device.type == "cuda" and "cuda_rng" in state:
            torch.cuda.set_rng_state(state["cuda_rng"], self.feed.device)
        self.epoch, self.step = int(state["epoch"]), int(state["step"])
        self.shards.epoch = self.epoch  # (each epoch's permutation comes from the seed and the epoch)


def _to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(v) for v in value)
    return value


__all__ = ["SAMPLINGS", "PathSampler", "SPOSTrainer"]
