"""One rank of a data-parallel gang of :class:`nas.engine.gang_executor.GangExecutor`: a Ray actor named
``nas-gang-<g>-rank-<r>`` in the dashboard, placed in its gang's placement group (bundle ``r``).

The gang starts once: every rank gets its data onto its device (:class:`nas.train.gang.GangRunner`), rank 0 names
an address (:meth:`GangMember.address`), and every rank joins the process group there (:meth:`GangMember.setup`),
which then serves every trial the gang runs. A trial is one task per rank: rank 0's is a streaming generator whose
items are the ones a single trainer actor sends (:mod:`nas.engine.trainer_actor`: the start, each report, the
checkpoint) and then :class:`GangEnded`; every other rank's returns a :class:`RankEnd`.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import socket
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import ray

from nas.core.types import Decision, Result, Trial, arch_key
from nas.engine.channel import TrialChannel
from nas.engine.protocol import KeepRule, TrainFn
from nas.engine.trainer_actor import CheckpointNext

if TYPE_CHECKING:
    from nas.core.space import SearchSpace
    from nas.train.data import Dataset
    from nas.train.settings import TrainSettings


@dataclasses.dataclass(frozen=True, slots=True)
class Began:
    """Rank 0 began the trial at ``time`` (the gang's first stream item: the driver marks the trial RUNNING)."""

    time: float


@dataclasses.dataclass(frozen=True, slots=True)
class GangEnded:
    """Rank 0's last item: the trial's result, and whether the ranks ended it in step (else the gang is rebuilt)."""

    result: Result
    clean: bool


@dataclasses.dataclass(frozen=True, slots=True)
class RankEnd:
    """How another rank's part of a trial ended: in step or not, and where it failed, its typed reason."""

    rank: int
    clean: bool
    epoch: int
    failure: str | None = None  # a FailureKind's value
    error: str | None = None


def meeting_point() -> tuple[str, int]:
    """This node's address and a free port on it, where a gang's process group meets (rank 0 names it)."""
    host = ray.util.get_node_ip_address()
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return host, s.getsockname()[1]


@ray.remote(concurrency_groups={"monitor": 1})  # type: ignore[call-overload]
class GangMember:
    """Rank ``rank`` of gang ``gang`` (``world`` ranks). Trials run one at a time (the default group); ``info`` and
    ``decide`` answer while one runs (their own group). Torch uses ``threads`` threads (its CPU share)."""

    def __init__(self, name: str, gang: int, rank: int, world: int, space: SearchSpace | None, data: Dataset | None,
                 settings: TrainSettings | None, train: TrainFn | None, threads: int) -> None:
        import torch

        self.name, self.gang, self.rank, self.world = name, gang, rank, world
        self.space, self.data, self.settings, self.train = space, data, settings, train
        torch.set_num_threads((settings.threads if settings is not None else None) or threads)
        self.runner: Any = None
        self.backend: str | None = None
        self.current: dict[str, Any] | None = None
        self.channels: dict[int, TrialChannel] = {}

    def address(self) -> tuple[str, int]:
        """Rank 0: where the gang's process group meets (:func:`meeting_point`)."""
        return meeting_point()

    def setup(self, address: tuple[str, int], backend: str, timeout: float) -> dict[str, Any]:
        """Join the gang's process group (once for the gang's life) and make this rank's trial runner."""
        from nas.train.gang import Gang, GangRunner

        gang = Gang.join(*address, rank=self.rank, world=self.world, backend=backend, timeout=timeout)
        self.runner = GangRunner(self.data, self.settings, gang=gang, train=self.train, worker=self.name)
        self.backend = backend
        return self._info()

    def _begin(self, trial: Trial) -> None:
        arch = self.space.format(trial.arch) if self.space is not None else arch_key(trial.arch)
        self.current = {"trial_id": trial.trial_id, "arch": arch, "since": time.time()}
        stamp = datetime.datetime.now().isoformat(timespec="seconds")
        print(f"{stamp} {self.name}: trial {trial.trial_id} started (rank {self.rank} of {self.world}): {arch}",
              flush=True)  # the actor's log in the dashboard

    def lead(self, trial: Trial, checkpoint: bytes | None, inherit: bytes | None, keep: KeepRule,
             wait_epochs: frozenset[int]) -> Iterator[Any]:
        """Rank 0's part, a streaming generator: :class:`Began`, a Report per epoch as it happens, the checkpoint
        where kept (:class:`CheckpointNext`, then its bytes, left in the object store), :class:`GangEnded`. The
        training runs on a thread of its own so that :meth:`decide` reaches it."""
        self._begin(trial)
        yield Began(time.time())
        channel = self.channels[trial.trial_id] = TrialChannel(wait_epochs)
        try:
            channel.start(lambda: self.runner.run(trial, self.space, checkpoint, report=channel.report,
                                                  inherit=inherit, keep=keep))
            result, ckpt = yield from channel.reports(trial.trial_id, self.name)
        finally:
            self.current = None
            self.channels.pop(trial.trial_id, None)
        result.node = ray.get_runtime_context().get_node_id()[:12]
        if ckpt is not None:
            yield CheckpointNext()
            yield ckpt
        yield GangEnded(result, self.runner.clean)

    def follow(self, trial: Trial, checkpoint: bytes | None, inherit: bytes | None) -> RankEnd:
        """Any other rank's part: the same training, in step with rank 0; how it ended."""
        self._begin(trial)
        try:
            result, _ = self.runner.run(trial, self.space, checkpoint, inherit=inherit, keep=False)
        finally:
            self.current = None
        return RankEnd(self.rank, self.runner.clean, result.epoch,
                       result.failure.value if result.failure is not None else None, result.error)

    @ray.method(concurrency_group="monitor")
    def decide(self, trial_id: int, decision: Decision) -> None:
        """Rank 0: the driver's answer to a report of ``trial_id`` (it broadcasts it to the other ranks)."""
        channel = self.channels.get(trial_id)
        if channel is not None:
            channel.decide(decision)

    @ray.method(concurrency_group="monitor")
    def info(self) -> dict[str, Any]:
        """Who and where this rank is, and the trial it trains (the dashboard and ``nas status`` show it)."""
        return self._info()

    def _info(self) -> dict[str, Any]:
        torch = sys.modules.get("torch")
        return {"name": self.name, "gang": self.gang, "rank": self.rank, "world": self.world, "pid": os.getpid(),
                "backend": self.backend, "threads": torch.get_num_threads() if torch else None,
                "gpu_ids": ray.get_gpu_ids(), "node": ray.get_runtime_context().get_node_id(),
                "current": self.current}

    def __repr__(self) -> str:  # the dashboard's actor list shows it
        return self.name


__all__ = ["GangEnded", "GangMember", "RankEnd", "meeting_point"]
