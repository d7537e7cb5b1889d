"""The Ray trainer actor: one worker of :class:`nas.engine.ray_pool.RayExecutor`'s pool, named ``nas-trainer-<i>``
in the dashboard. Trials come in by a plain actor call (:meth:`TrainerActor.take`, numbered per actor so they run
in the order they were sent whatever order Ray delivers them in) and run one at a time; everything the actor has to
say goes out on ONE streaming generator started once for its life (:meth:`TrainerActor.stream`), whose items are
typed messages: the trials' per-epoch reports, a note that a checkpoint follows (then the checkpoint's bytes as an
item of their own, left in the object store, owned by the driver), and each trial's result. Messages that are ready
together travel as one item (a tuple: a trivial trial's report and result make one, and so do the end of one trial
and the reports of the trial queued behind it), so the driver waits on one reference per actor and handles as few
items as the training allows; a trial's start needs none (the driver knows it: the actor runs its trials in their
numbered order)."""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import ray
import ray.exceptions

from nas.core.types import Decision, FailureKind, Report, Result, Trial, arch_key
from nas.engine.channel import Crashed, Done, Reported, TrainingThread, TrialChannel
from nas.engine.protocol import KeepRule, TrainFn

if TYPE_CHECKING:
    from nas.core.space import SearchSpace
    from nas.train.data import Dataset
    from nas.train.settings import TrainSettings


log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class CheckpointNext:
    """The stream's next item is the checkpoint of the trial in training (bytes, kept in the object store, not
    fetched)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Ended:
    """A trial's final result."""

    result: Result


StreamItem = tuple[Report | Ended | CheckpointNext, ...]
"""One item of an actor's stream: the messages ready together (reports, results), in order; where it ends with
:class:`CheckpointNext` the next item is that checkpoint's bytes."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Job:
    trial: Trial
    sources: tuple[Any, Any]  # (checkpoint_from, inherit_from): bytes, an ObjectRef (fetched here) or None
    keep: KeepRule
    wait_epochs: frozenset[int]


def fetch_checkpoint(item: Any) -> bytes | None:
    """A kept checkpoint's bytes: its ObjectRef (left in the object store by the actor's stream) fetched, or the
    bytes put back on resume (kept as they are, and sent to a worker with the trial); None when it was
    kept on a node that has left the cluster."""
    if item is None or isinstance(item, bytes):
        return item
    try:
        return ray.get(item)  # type: ignore[no-any-return]
    except ray.exceptions.RayError:
        log.warning("a kept checkpoint was lost with its node")
        return None


@ray.remote(concurrency_groups={"monitor": 1, "inbox": 1})  # type: ignore[call-overload]
class TrainerActor:
    """One worker: trials run one at a time, in the order taken, on the actor's training thread; ``stream`` (the
    default group, started once) sends what they say; ``take`` (its own group) queues a trial; ``decide``, ``cancel``
    and ``info`` answer while one runs (the monitor group), ``info`` with the trial and architecture it is training.
    Its torch thread count is its CPU share, so actors never oversubscribe cores; a worker without data never loads
    torch."""

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
        self._jobs: dict[int, _Job] = {}  # number -> trial taken, not begun
        self._next = 0  # the number of the next trial to begin
        self._cancelled: set[int] = set()  # numbers of taken trials cancelled before they began
        self._arrived = threading.Condition()

    @staticmethod
    def _set_threads(n: int) -> None:
        import torch

        torch.set_num_threads(n)

    @ray.method(concurrency_group="inbox")
    def take(self, number: int, trial: Trial, sources: tuple[Any, Any], keep: KeepRule,
             wait_epochs: frozenset[int]) -> None:
        """Queue ``trial`` as this actor's ``number``-th (from 0); ``sources``: its checkpoint and the one it
        inherits from, as bytes or ObjectRefs (fetched when it begins: a lost one fails only this trial)."""
        with self._arrived:
            self._jobs[number] = _Job(trial, sources, keep, wait_epochs)
            if number == self._next and self.current is None:
                self._set_current(trial)  # (info answers at once with the trial about to begin)
            self._arrived.notify()

    def _take_next(self, wait: bool) -> tuple[int, _Job] | None:
        with self._arrived:
            while (job := self._jobs.pop(self._next, None)) is None:
                if not wait:
                    return None
                self._arrived.wait()
            self._next += 1
            return self._next - 1, job

    def _set_current(self, trial: Trial) -> None:
        arch = self.space.format(trial.arch) if self.space is not None else arch_key(trial.arch)
        self.current = {"trial_id": trial.trial_id, "arch": arch, "since": time.time()}

    def stream(self) -> Iterator[StreamItem | bytes]:
        """The actor's one stream, for its whole life (see the module docstring): what is ready goes out together
        when the actor would otherwise wait; a checkpoint's bytes go as an item of their own after
        :class:`CheckpointNext`. Each trial trains on the actor's training thread
        (:class:`nas.engine.channel.TrialChannel`) so that the driver's decisions (:meth:`decide`, in another
        concurrency group) reach it while it trains."""
        pending: list[Report | Ended | CheckpointNext] = []
        while True:
            taken = self._take_next(wait=not pending)
            if taken is None:
                yield tuple(pending)
                pending.clear()
                continue
            yield from self._run(*taken, pending)

    def _run(self, number: int, job: _Job, pending: list[Report | Ended | CheckpointNext]) -> Iterator[Any]:
        trial = job.trial
        if number in self._cancelled:
            self._cancelled.discard(number)
            pending.append(Ended(Result.cancelled(trial.trial_id, worker=self.name)))
            return
        self._set_current(trial)
        assert self.current is not None
        start = self.current["since"] = time.time()
        print(f"{datetime.datetime.fromtimestamp(start).isoformat(timespec='seconds')} {self.name}: "
              f"trial {trial.trial_id} started: {self.current['arch']}", flush=True)  # the actor's log in the dashboard
        try:
            checkpoint, inherit = (fetch_source(s) for s in job.sources)
        except ray.exceptions.RayError as e:
            self.current = None
            pending.append(Ended(Result.failed(trial.trial_id, f"its checkpoint was lost: {type(e).__name__}",
                                               FailureKind.CHECKPOINT_MISSING, worker=self.name)))
            return
        try:
            channel = self.channels[trial.trial_id] = TrialChannel(job.wait_epochs)
            channel.start(lambda: self.runner.run(trial, self.space, checkpoint,  # type: ignore[arg-type]
                                                  report=channel.report, inherit=inherit, keep=job.keep), self.thread)
            end: Done | Crashed | None = None
            while end is None:
                messages = channel.ready()
                if not messages:
                    if pending:  # (about to wait: what is ready goes now)
                        yield tuple(pending)
                        pending.clear()
                    messages = [channel.next()]
                for message in messages:
                    if isinstance(message, Reported):
                        pending.append(Report(trial.trial_id, message.epoch, message.metrics, message.score,
                                              message.time, self.name))
                    else:
                        end = message
        finally:
            self.current = None
            self.channels.pop(trial.trial_id, None)
        if isinstance(end, Crashed):  # (past the runner's safety net: this trial fails, the stream goes on)
            pending.append(Ended(Result.failed(trial.trial_id, f"{type(end.error).__name__}: {end.error}",
                                               worker=self.name)))
            return
        result, ckpt = end.value
        result.node = ray.get_runtime_context().get_node_id()[:12]
        if ckpt is not None:
            pending.append(CheckpointNext())
            yield tuple(pending)
            pending.clear()
            yield ckpt
        pending.append(Ended(result))

    @ray.method(concurrency_group="monitor")
    def decide(self, trial_id: int, decision: Decision) -> None:
        """The driver's answer to a report of ``trial_id``: STOP or PAUSE, or CONTINUE where it waits."""
        self._decide(trial_id, decision)

    def _decide(self, trial_id: int, decision: Decision) -> None:
        channel = self.channels.get(trial_id)
        if channel is not None:
            channel.decide(decision)

    @ray.method(concurrency_group="monitor")
    def cancel(self, number: int, trial_id: int) -> None:
        """The driver cancels the actor's ``number``-th trial: where it has not begun it ends at once without
        training (CANCELLED); where it trains it stops at its next report."""
        with self._arrived:
            if number >= self._next:
                self._cancelled.add(number)
                return
        self._decide(trial_id, Decision.STOP)

    @ray.method(concurrency_group="monitor")
    def info(self) -> dict[str, Any]:
        torch = sys.modules.get("torch")
        return {"name": self.name, "pid": os.getpid(), "threads": torch.get_num_threads() if torch else None,
                "cuda": bool(torch and torch.cuda.is_available()), "gpu_ids": ray.get_gpu_ids(),
                "node": ray.get_runtime_context().get_node_id(), "current": self.current}

    def __repr__(self) -> str:  # the dashboard's actor list shows it
        return self.name


def fetch_source(item: Any) -> bytes | None:
    """A trial's checkpoint as handed to the actor: bytes as they are, an ObjectRef fetched (a lost one raises)."""
    return ray.get(item) if isinstance(item, ray.ObjectRef) else item  # type: ignore[no-any-return]


__all__ = ["fetch_checkpoint", "fetch_source", "CheckpointNext", "Ended", "StreamItem", "TrainerActor"]
