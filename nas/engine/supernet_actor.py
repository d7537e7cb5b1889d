"""Supernet training (:mod:`nas.train.supernet_spos`) on Ray: one actor, or a gang of ``ranks`` actors training the
supernet data-parallel, placed and joined by :class:`nas.engine.gang_pool.GangPool` (a placement group, rank 0's
address, one gloo or NCCL process group), each rank an actor named ``nas-supernet-0-rank-<r>`` in the dashboard.

Every rank builds the supernet from the same seed, seeds its path sampler alike (so all train the same path in
each step), trains its own shard of each epoch (:class:`nas.train.shard.ShardedFeed`) and steps its optimizer on the
gradients torch's ``DistributedDataParallel`` averaged (``find_unused_parameters=True``: a path uses a subset of
the weights; the paths' unused weights get no gradient on any rank, as in one process). Rank 0's task is a
streaming generator: after each epoch an :class:`EpochDone` (the epoch's record, its figures summed over the
ranks, the trainer's state and the weights' bytes), which the driver hands to the run directory's owner; the run
directory is not this module's business. A rank that dies or stops answering fails the training with a
:class:`SupernetFailed` of kind COLLECTIVE that names it (the collectives wait ``collective_timeout`` at most).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import ray
import ray.exceptions

from nas.core.types import FailureKind
from nas.engine.gang_actor import meeting_point
from nas.engine.gang_pool import GangPool, GangSpec

if TYPE_CHECKING:
    from nas.core.space import SearchSpace
    from nas.train.data import Dataset
    from nas.train.settings import TrainSettings


class SupernetFailed(RuntimeError):
    """The supernet's training failed on the workers, of ``kind`` (a FailureKind), said in one line."""

    def __init__(self, kind: FailureKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclasses.dataclass(frozen=True)
class SupernetJob:
    """What every rank trains: ``epochs`` epochs, paths sampled by ``sampling``, everything seeded by ``seed``."""

    epochs: int
    sampling: str
    seed: int


@dataclasses.dataclass(frozen=True)
class EpochDone:
    """Rank 0's item after each epoch: its record (``train_loss``/``train_acc``/``samples`` over every rank,
    ``ranks``), the trainer's state (:meth:`nas.train.supernet_spos.SPOSTrainer.state_dict`), the weights' bytes."""

    record: dict[str, Any]
    state: dict[str, Any]
    weights: bytes


@ray.remote
class SupernetRank:
    """Rank ``rank`` of ``world`` training the supernet of ``space`` on ``data`` (a :class:`GangSpec` member: built
    with its name, gang, rank and world, then the spec's ``member_args``, then its torch ``threads``)."""

    def __init__(self, name: str, gang: int, rank: int, world: int, space: SearchSpace, data: Dataset,
                 settings: TrainSettings, job: SupernetJob, threads: int) -> None:
        import torch

        self.name, self.rank, self.world = name, rank, world
        self.space, self.data, self.settings, self.job = space, data, settings, job
        torch.set_num_threads(settings.threads or threads)
        self.gang: Any = None
        self.trainer: Any = None

    def address(self) -> tuple[str, int]:
        """Rank 0: where the process group meets (:func:`nas.engine.gang_actor.meeting_point`)."""
        return meeting_point()

    def setup(self, address: tuple[str, int], backend: str, timeout: float) -> dict[str, Any]:
        """Join the process group (with more than one rank), put the data on the device, build the supernet and its
        trainer (every rank from the same seed)."""
        import torch

        from nas.train.device import DeviceSide
        from nas.train.gang import Gang
        from nas.train.supernet_spos import SPOSTrainer

        if self.world > 1:
            self.gang = Gang.join(*address, rank=self.rank, world=self.world, backend=backend, timeout=timeout)
        side = DeviceSide(self.data, self.settings)  # (before seeding, as in one process: its warm-up draws numbers)
        torch.manual_seed(self.job.seed)
        supernet = self.space.supernet(side.task).to(side.device)
        forward = self.gang.wrap(supernet, find_unused_parameters=True) if self.gang is not None else None
        self.trainer = SPOSTrainer(supernet, side.feed, self.settings.defaults(), epochs=self.job.epochs,
                                   sampling=self.job.sampling, seed=self.job.seed, autocast=side.autocast,
                                   rank=self.rank, world=self.world, forward=forward)
        return {"name": self.name, "rank": self.rank, "node": ray.get_runtime_context().get_node_id(),
                "threads": torch.get_num_threads(), "device": str(side.device)}

    def _epochs(self, state: dict[str, Any] | None) -> Iterator[dict[str, Any]]:
        import torch

        from nas.train.collective import collective_error
        from nas.train.gang import first_line

        trainer = self.trainer
        if state is not None:
            trainer.load_state_dict(state)
        while trainer.epoch < trainer.epochs:
            if self.rank:  # its own dropout and augmentation, drawn alike on a resume
                torch.manual_seed(self.job.seed * 1_000_003 + 7919 * self.rank + trainer.epoch)
            try:
                record = trainer.train_epoch()
                if self.gang is not None:
                    n = record["samples"]
                    loss, right, rows = self.gang.total(torch.tensor(
                        [record["train_loss"] * n, record["train_acc"] * n, n], dtype=torch.float64)).tolist()
                    record.update(train_loss=loss / rows, train_acc=right / rows, samples=int(rows))
            except RuntimeError as e:
                if self.gang is not None and collective_error(e):
                    raise SupernetFailed(FailureKind.COLLECTIVE, f"rank {self.rank}: a collective of the gang failed "
                                         f"in epoch {trainer.epoch + 1}: {first_line(e)}") from None
                raise
            yield {**record, "ranks": self.world}

    def lead(self, state: dict[str, Any] | None) -> Iterator[EpochDone]:
        """Rank 0, a streaming generator: an :class:`EpochDone` after each epoch, from ``state`` (None: the start)."""
        for record in self._epochs(state):
            yield EpochDone(record, self.trainer.state_dict(), self.weights(record["epoch"]))

    def follow(self, state: dict[str, Any] | None) -> dict[str, Any]:
        """Any other rank: the same epochs in step with rank 0; its records and the digest of its final weights."""
        records = list(self._epochs(state))
        return {"rank": self.rank, "records": records, "digest": self.digest()}

    def weights(self, epoch: int) -> bytes:
        from nas.train.supernet_io import weights_bytes

        return weights_bytes(self.trainer.supernet, space_spec=self.space.spec(), epoch=epoch)

    def digest(self) -> str:
        """:func:`weights_digest` of this rank's weights."""
        return weights_digest(self.trainer.supernet.state_dict())

    def __repr__(self) -> str:  # the dashboard's actor list shows it
        return self.name


def weights_digest(state: Mapping[str, Any]) -> str:
    """SHA-256 over a state dict's names and tensors' bytes (in name order): equal on ranks that hold equal weights."""
    h = hashlib.sha256()
    for name in sorted(state):
        h.update(name.encode())
        h.update(state[name].detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


class SupernetGang:
    """``ranks`` :class:`SupernetRank` actors of ``cpus`` CPUs (and ``gpus`` GPUs) each, started and joined (the
    constructor waits, ``start_timeout`` seconds at most); :meth:`train` runs the epochs. Needs Ray initialised."""

    def __init__(self, space: SearchSpace, data: Dataset, settings: TrainSettings, job: SupernetJob, *,
                 ranks: int = 1, cpus: float = 1.0, gpus: float = 0.0, strategy: str = "PACK",
                 collective_timeout: float = 120.0, start_timeout: float = 300.0) -> None:
        if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
            raise ValueError(f"ranks (--trial-workers) must be an integer >= 1, got {ranks!r}")
        if not ray.is_initialized():
            raise RuntimeError("SupernetGang needs Ray: call ray.init() (or nas.connect()) first")
        cluster = ray.cluster_resources()
        if ranks * cpus > cluster.get("CPU", 0) + 1e-9:
            raise ValueError(f"{ranks} ranks of {cpus:g} CPUs need {ranks * cpus:g} CPUs; the Ray cluster has "
                             f"{cluster.get('CPU', 0):g}")
        spec = GangSpec(ranks=ranks, strategy=strategy, cpus=cpus, gpus=gpus, backend="nccl" if gpus else "gloo",
                        collective_timeout=collective_timeout, member_args=(space, data, settings, job),
                        name_prefix="nas-supernet", member=SupernetRank)
        self.ranks = ranks
        self.pool = GangPool(1, spec, start_timeout=start_timeout, wake=lambda: None)
        self.gang = self.pool.take()
        self.followed: list[dict[str, Any]] = []  # the other ranks' ends, once :meth:`train` finished

    def train(self, state: dict[str, Any] | None = None) -> Iterator[EpochDone]:
        """The epochs after ``state`` (None: all), each as rank 0 finishes it; then the other ranks' ends are in
        :attr:`followed`. A failure on any rank: :class:`SupernetFailed`."""
        lead, *others = self.gang.actors
        follow = [actor.follow.remote(state) for actor in others]
        epoch = int(state["epoch"]) if state is not None else 0
        try:
            for ref in lead.lead.remote(state):
                done: EpochDone = ray.get(ref)
                epoch = done.record["epoch"]
                yield done
            self.followed = ray.get(follow)
        except ray.exceptions.RayError as e:
            raise self._failure(e, follow, epoch + 1) from None

    def _failure(self, e: ray.exceptions.RayError, follow: list[Any], epoch: int) -> SupernetFailed:
        """One line for what went wrong: a rank that died (named), else the first rank's own error."""
        for r, ref in enumerate([None, *follow]):
            try:
                if ref is not None:
                    ray.get(ref, timeout=0 if isinstance(e, ray.exceptions.ActorDiedError) else 5)
            except ray.exceptions.ActorDiedError:
                return SupernetFailed(FailureKind.COLLECTIVE, f"supernet training failed in epoch {epoch}: rank {r} "
                                      f"(actor nas-supernet-0-rank-{r}) died")
            except Exception:  # noqa: BLE001 (its own error: the lead's is told below)
                pass
        if isinstance(e, ray.exceptions.ActorDiedError):
            return SupernetFailed(FailureKind.COLLECTIVE, f"supernet training failed in epoch {epoch}: rank 0 "
                                  "(nas-supernet-0-rank-0) died")
        cause = e.cause if isinstance(e, ray.exceptions.RayTaskError) else e
        if isinstance(cause, SupernetFailed):
            return SupernetFailed(cause.kind, f"supernet training failed: {cause}")
        text = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        return SupernetFailed(FailureKind.ERROR, f"supernet training failed in epoch {epoch}: "
                              f"{type(cause).__name__}: {text}")

    def shutdown(self) -> None:
        self.pool.shutdown()


__all__ = ["EpochDone", "SupernetFailed", "SupernetGang", "SupernetJob", "SupernetRank", "weights_digest"]
