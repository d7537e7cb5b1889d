"""The Ray trainer actor: one worker of :class:`nas.engine.ray_pool.RayExecutor`'s pool, named ``nas-trainer-<i>``
in the dashboard, training one trial at a time as a streaming-generator task (``trial-<id>``) whose items
are the trial's start, its per-epoch reports, its checkpoint where kept, and its result."""

from __future__ import annotations

import datetime
import os
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import ray

from nas.core.types import Decision, Trial, arch_key
from nas.engine.channel import TrialChannel
from nas.engine.protocol import KeepRule

if TYPE_CHECKING:
    from nas.core.space import SearchSpace
    from nas.train.data import Dataset
    from nas.train.trainer import TrainerFactory, TrainSettings


@ray.remote(concurrency_groups={"monitor": 1})  # type: ignore[call-overload]
class TrainerActor:
    """One worker: trials run one at a time (the default group); ``info`` answers while one runs (its own
    group), with the trial and architecture it is training. Its torch thread count is its CPU share, so
    actors never oversubscribe cores; a trainer that does not use torch never loads it."""

    def __init__(self, name: str, space: SearchSpace | None, data: Dataset | None, settings: TrainSettings | None,
                 factory: TrainerFactory, threads: int, factory_kwargs: dict[str, Any]) -> None:
        self.name = name
        self.space = space
        self.threads = threads
        self.current: dict[str, Any] | None = None
        self.channels: dict[int, TrialChannel] = {}  # the trial in training (at most one) and its channel
        if settings is not None:
            self._set_threads(settings.threads or threads)
        self.trainer = factory(data, settings, **factory_kwargs)  # type: ignore[call-arg,arg-type]
        if hasattr(self.trainer, "worker"):
            self.trainer.worker = name
        if settings is None and "torch" in sys.modules:
            self._set_threads(threads)

    @staticmethod
    def _set_threads(n: int) -> None:
        import torch

        torch.set_num_threads(n)

    def run(self, trial: Trial, checkpoint: bytes | None, inherit: bytes | None, keep: KeepRule,
            wait_epochs: frozenset[int]) -> Iterator[Any]:
        """A streaming generator, one message to the driver per item: ``{"time": ..}`` as the trial begins,
        ``{"report": (epoch, metrics, score, time)}`` after each epoch as it happens, then, where the
        checkpoint is kept, ``{"checkpoint": True}`` followed by the checkpoint itself (it stays in the
        object store, owned by the driver, never fetched by it unless used), and ``{"result": Result}``.
        The training runs on a thread of its own (:class:`nas.engine.channel.TrialChannel`) so that the
        driver's decisions (:meth:`decide`, in another concurrency group) reach it while it trains."""
        from nas.train.trainer import run_trainer, trainer_reports

        start = time.time()
        arch = self.space.format(trial.arch) if self.space is not None else arch_key(trial.arch)
        self.current = {"trial_id": trial.trial_id, "arch": arch, "since": start}
        print(f"{datetime.datetime.fromtimestamp(start).isoformat(timespec='seconds')} {self.name}: "
              f"trial {trial.trial_id} started: {arch}", flush=True)  # the actor's log in the dashboard
        yield {"time": start}
        try:
            if not trainer_reports(self.trainer):
                result, ckpt = run_trainer(self.trainer, trial, self.space, checkpoint, keep=keep)  # type: ignore[arg-type]
            else:
                channel = self.channels[trial.trial_id] = TrialChannel(wait_epochs)
                channel.start(lambda: run_trainer(self.trainer, trial, self.space, checkpoint,  # type: ignore[arg-type]
                                                  report=channel.report, inherit=inherit, keep=keep))
                while (item := channel.next())[0] == "report":
                    yield {"report": item[1:]}
                if item[0] == "error":
                    raise item[1]
                result, ckpt = item[1]
        finally:
            self.current = None
            self.channels.pop(trial.trial_id, None)
        result.node = ray.get_runtime_context().get_node_id()[:12]
        if ckpt is not None:
            yield {"checkpoint": True}
            yield ckpt
        yield {"result": result}

    @ray.method(concurrency_group="monitor")
    def decide(self, trial_id: int, decision: Decision) -> None:
        """The driver's answer to a report of ``trial_id``: STOP or PAUSE, or CONTINUE where it waits."""
        channel = self.channels.get(trial_id)
        if channel is not None:
            channel.decide(decision)

    @ray.method(concurrency_group="monitor")
    def info(self) -> dict[str, Any]:
        torch = sys.modules.get("torch")
        return {"name": self.name, "pid": os.getpid(), "threads": torch.get_num_threads() if torch else None,
                "cuda": bool(torch and torch.cuda.is_available()), "gpu_ids": ray.get_gpu_ids(),
                "node": ray.get_runtime_context().get_node_id(), "current": self.current}

    def __repr__(self) -> str:  # the dashboard's actor list shows it
        return self.name


__all__ = ["TrainerActor"]
