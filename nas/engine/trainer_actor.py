"""The Ray trainer actor: one worker of :class:`nas.engine.ray_pool.RayExecutor`'s pool, named ``nas-trainer-<i>``
in the dashboard, training one trial at a time as a streaming-generator task (``trial-<id>``) whose items are
typed messages: the trial's per-epoch reports, a note that its checkpoint follows (then the checkpoint's bytes as an
item of their own, left in the object store), and its result. Messages that are ready together travel as one item
(a tuple: a trivial trial's report and result make one), so the driver handles as few items as the training allows;
the trial's start needs none (the driver knows it: an actor runs its trials in the order they were sent)."""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import ray
import ray.exceptions

from nas.core.types import Decision, Report, Result, Trial, arch_key
from nas.engine.channel import Crashed, Done, Reported, TrainingThread, TrialChannel
from nas.engine.protocol import KeepRule, TrainFn

if TYPE_CHECKING:
    from nas.core.space import SearchSpace
    from nas.train.data import Dataset
    from nas.train.settings import TrainSettings


log = logging.getLogger(__name__)

@dataclasses.dataclass(frozen=True, slots=True)
class CheckpointNext:
    """The stream's next item is the trial's checkpoint (bytes, kept in the object store, not fetched)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Ended:
    """The trial's final result."""

    result: Result


StreamItem = tuple[Report | Ended, ...] | CheckpointNext
"""One item of a trial's stream: the messages ready together (reports, then perhaps the result), or the note that
the checkpoint's bytes follow as the next item."""


def fetch_checkpoint(item: Any) -> bytes | None:
    """A kept checkpoint's bytes: its ObjectRef (left in the object store by the actor's stream) fetched, or the
    bytes put back on resume (kept as they are, and sent to a worker in the task's arguments); None when it was
    kept on a node that has left the cluster."""
    if isinstance(item, bytes):
        return item
    try:
        return ray.get(item)  # type: ignore[no-any-return]
    except ray.exceptions.RayError:
        log.warning("a kept checkpoint was lost with its node")
        return None


@ray.remote(concurrency_groups={"monitor": 1})  # type: ignore[call-overload]
class TrainerActor:
    """One worker: trials run one at a time (the default group); ``info`` answers while one runs (its own
    group), with the trial and architecture it is training. Its torch thread count is its CPU share, so
    actors never oversubscribe cores; a worker without data never loads torch."""

    def __init__(self, name: str, space: SearchSpace | None, data: Dataset | None, settings: TrainSettings | None,
                 train: TrainFn | None, threads: int) -> None:
        from nas.train.runner import TrialRunner

        self.name = name
        self.space = space
        self.threads = threads
        self.current: dict[str, Any] | None = None
        self.channels: dict[int, TrialChannel] = {}  # the trial in training (at most one) and its channel
        if data is not None or settings is not None:  # (a bare benchmark worker, neither, never loads torch)
            self._set_threads((settings.threads if settings is not None else None) or threads)
        self.runner = TrialRunner(data, settings, train=train, worker=name)
        self.thread = TrainingThread()  # (one for the actor's life: no thread started per trial)

    @staticmethod
    def _set_threads(n: int) -> None:
        import torch

        torch.set_num_threads(n)

    def run(self, trial: Trial, checkpoint: bytes | None, inherit: bytes | None, keep: KeepRule,
            wait_epochs: frozenset[int]) -> Iterator[StreamItem | bytes]:
        """A streaming generator: a tuple of the messages ready together per item (each epoch's
        :class:`nas.core.types.Report` as it happens; the last ones and :class:`Ended` together where they come
        together), and, where the checkpoint is kept, :class:`CheckpointNext` followed by the checkpoint itself (it
        stays in the object store, owned by the driver, never fetched by it unless used) before :class:`Ended`. The
        training runs on the actor's training thread (:class:`nas.engine.channel.TrialChannel`) so that the
        driver's decisions (:meth:`decide`, in another concurrency group) reach it while it trains."""
        start = time.time()
        arch = self.space.format(trial.arch) if self.space is not None else arch_key(trial.arch)
        self.current = {"trial_id": trial.trial_id, "arch": arch, "since": start}
        print(f"{datetime.datetime.fromtimestamp(start).isoformat(timespec='seconds')} {self.name}: "
              f"trial {trial.trial_id} started: {arch}", flush=True)  # the actor's log in the dashboard
        reports: list[Report] = []
        try:
            channel = self.channels[trial.trial_id] = TrialChannel(wait_epochs)
            channel.start(lambda: self.runner.run(trial, self.space, checkpoint,  # type: ignore[arg-type]
                                                  report=channel.report, inherit=inherit, keep=keep), self.thread)
            end: Done | Crashed | None = None
            while end is None:
                for message in [channel.next(), *channel.ready()]:  # (what came together goes together)
                    if isinstance(message, Reported):
                        reports.append(Report(trial.trial_id, message.epoch, message.metrics, message.score,
                                              message.time, self.name))
                    else:
                        end = message
                if end is None:
                    yield tuple(reports)
                    reports = []
            if isinstance(end, Crashed):
                raise end.error
            result, ckpt = end.value
        finally:
            self.current = None
            self.channels.pop(trial.trial_id, None)
        result.node = ray.get_runtime_context().get_node_id()[:12]
        if ckpt is not None:
            if reports:
                yield tuple(reports)
            yield CheckpointNext()
            yield ckpt
            yield (Ended(result),)
        else:
            yield (*reports, Ended(result))

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


__all__ = ["fetch_checkpoint", "CheckpointNext", "Ended", "StreamItem", "TrainerActor"]
