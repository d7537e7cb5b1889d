"""Data-parallel trials: one candidate trained by a gang of ``world`` processes (ranks), torch's
``DistributedDataParallel`` averaging their gradients, under the same trial contract as everywhere else.

:class:`Gang` is a process's place in its gang: the process group, made once when the gang starts (:meth:`Gang.join`:
gloo on CPUs, NCCL where every rank has a GPU of its own) and used by every trial it runs, and the few collectives
a trial needs. :class:`GangRunner` is the :class:`nas.train.runner.TrialRunner` of each rank. It runs the same
``train(ctx)`` on every rank with:

- ``ctx.rank``, ``ctx.world_size``; ``ctx.data`` this rank's shard of each epoch (:mod:`nas.train.shard`: same
  permutation on every rank, distinct rows); ``ctx.wrap(model)`` the DDP wrapper to train; ``ctx.evaluate()`` the
  whole validation split, each rank evaluating a slice and the gang adding up the sums;
- the candidate built on every rank from the same seed, its costs measured once (rank 0) and the constraints
  checked there; the ranks agree before training, so a build or a constraint that fails on any rank fails the
  trial on all of them, with that rank's typed reason, and nothing trains;
- reports: only rank 0's reach the driver; after each report rank 0 broadcasts the scheduler's answer, so every
  rank's ``ctx.report`` returns stop (or pause) at the same epoch;
- the checkpoint and the result from rank 0 only.

A collective that fails or outlasts the gang's timeout (a rank died or stopped answering) is a FAILED trial of
kind COLLECTIVE, never a hang. :attr:`GangRunner.clean` says whether the last trial left the ranks in step (it
trained to the end, or it failed before training, where every rank fails alike); the executor rebuilds a gang
that is not.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from nas.core.types import Decision, FailureKind, Outcome, Result, Trial
from nas.train.collective import collective_error
from nas.train.context import ReportFn, TrialContext, TrialFailure
from nas.train.runner import Keep, TrialRunner, failure_kind
from nas.train.shard import ShardedFeed

if TYPE_CHECKING:
    from nas.core.space import SearchSpace
    from nas.train.data import Dataset
    from nas.train.device import DeviceSide
    from nas.train.settings import TrainSettings

_DECISIONS = list(Decision)
def first_line(e: BaseException, limit: int = 300) -> str:
    """The first line of ``e``'s message, at most ``limit`` characters (gloo's run on)."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def loopback_interface() -> str | None:
    """The name of this machine's loopback network interface (``lo`` on Linux, ``lo0`` on macOS), if any."""
    return next((name for _, name in socket.if_nameindex() if name.startswith("lo")), None)


class Gang:
    """``rank`` of ``world`` in the default process group; ``device``: where the collectives' tensors live (the
    GPU with NCCL, else the CPU)."""

    def __init__(self, rank: int, world: int, device: torch.device | str = "cpu") -> None:
        self.rank, self.world, self.device = rank, world, torch.device(device)
        self._wrapped: tuple[Any, Any] | None = None

    @classmethod
    def join(cls, host: str, port: int, *, rank: int, world: int, backend: str = "gloo", timeout: float = 300.0
             ) -> Gang:
        """Join the gang whose rank 0 listens at ``host:port`` (every rank calls this once). ``timeout``: seconds
        any collective may wait for the others before it fails. On a loopback address gloo and NCCL are told to use
        the loopback interface (their own choice, from the host name, could be another)."""
        lo = loopback_interface() if ipaddress.ip_address(host).is_loopback else None
        for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
            if lo is not None and name not in os.environ:
                os.environ[name] = lo
        dist.init_process_group(backend, init_method=f"tcp://{host}:{port}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=timeout))
        return cls(rank, world, "cuda" if backend == "nccl" else "cpu")

    @contextmanager
    def _collective(self, what: str) -> Iterator[None]:
        try:
            yield
        except RuntimeError as e:
            raise TrialFailure(FailureKind.COLLECTIVE,
                               f"rank {self.rank}: {what} of the gang failed: {first_line(e)}") from e

    def agree(self, mine: Any) -> list[Any]:
        """Every rank's ``mine``, in rank order (small picklable values)."""
        out: list[Any] = [None] * self.world
        with self._collective("the agreement"):
            dist.all_gather_object(out, mine)
        return out

    def decision(self, mine: Decision | None) -> Decision:
        """Rank 0's ``mine``, on every rank."""
        code = torch.tensor([_DECISIONS.index(mine) if mine is not None else 0], device=self.device)
        with self._collective("the broadcast of the scheduler's decision"):
            dist.broadcast(code, src=0)
        return _DECISIONS[int(code.item())]

    def total(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` summed over the ranks."""
        buf = values.to(self.device)
        with self._collective("an all-reduce"):
            dist.all_reduce(buf)
        return buf

    def wrap(self, model: Any, **options: Any) -> Any:
        """``model`` in ``DistributedDataParallel`` (the same wrapper when asked twice); its construction broadcasts
        rank 0's weights to every rank."""
        if self._wrapped is not None and self._wrapped[0] is model:
            return self._wrapped[1]
        cuda = next(model.parameters()).device.type == "cuda"
        with self._collective("wrapping the model in DistributedDataParallel"):
            ddp = DistributedDataParallel(model, device_ids=[torch.cuda.current_device()] if cuda else None, **options)
        self._wrapped = (model, ddp)
        return ddp

    def forget(self) -> None:
        self._wrapped = None


class GangRunner(TrialRunner):
    """The trial runner of one rank of ``gang`` (see the module docstring). ``clean``: whether its last trial left
    the ranks in step."""

    def __init__(self, data: Dataset | None, settings: TrainSettings | None = None, *, gang: Gang,
                 train: Callable[[TrialContext], Any] | None = None, worker: str | None = None) -> None:
        super().__init__(data, settings, train=train, worker=worker)
        self.gang = gang
        self.clean = True

    def run(self, trial: Trial, space: SearchSpace | None, checkpoint: bytes | None, *, report: ReportFn | None = None,
            inherit: bytes | None = None, keep: Keep = True) -> tuple[Result, bytes | None]:
        """As :meth:`TrialRunner.run` on every rank; ``report`` and ``keep`` matter on rank 0 only."""
        gang, self.clean = self.gang, True  # (a failure before any collective is the same on every rank)
        gang.forget()

        def relay(epoch: int, metrics: Any, score: float | None) -> Decision:
            mine = (report(epoch, metrics, score) if report is not None else Decision.CONTINUE) if gang.rank == 0 \
                else None
            return gang.decision(mine)

        try:
            return super().run(trial, space, checkpoint, report=relay, inherit=inherit,
                               keep=keep if gang.rank == 0 else False)
        finally:
            gang.forget()

    def _prepare(self, side: DeviceSide, trial: Trial, space: SearchSpace, hp: dict[str, Any]
                 ) -> tuple[Any, dict[str, Any]]:
        """Built on every rank, measured on rank 0; then the ranks agree, so that all train or none does."""
        mine: tuple[str, str, dict[str, Any]] | None = None
        model: Any = None
        costs: dict[str, Any] | None = None
        try:
            model, n_params = self._build(side, trial, space)
            if self.gang.rank == 0:
                costs = self._measure(side, model, n_params, hp, trial.arch)
        except Exception as e:
            error = e
            mine = (failure_kind(e).value, f"{type(e).__name__}: {e}" if not isinstance(e, TrialFailure) else str(e),
                    getattr(e, "metrics", {}))
        self.clean = False
        verdicts = self.gang.agree((mine, costs))
        failed = [(rank, verdict) for rank, (verdict, _) in enumerate(verdicts) if verdict is not None]
        if failed:
            self.clean = True  # every rank stops here, in step
            if mine is not None:
                raise error
            rank, (kind, message, metrics) = failed[0]
            raise TrialFailure(FailureKind(kind), f"rank {rank}: {message}", metrics)
        torch.manual_seed(self.settings.seed * 1_000_003 + trial.trial_id + 7919 * self.gang.rank)  # own dropout
        return model, verdicts[0][1]

    def _context(self, trial: Trial, **parts: Any) -> TrialContext:
        gang = self.gang
        if parts.get("data") is not None and self.side is not None:
            feed = ShardedFeed(parts["data"], rank=gang.rank, world=gang.world,
                               seed=self.settings.seed * 1_000_003 + trial.trial_id)
            side = self.side

            def evaluate(model: Any) -> tuple[float, float]:
                module = model.module if isinstance(model, DistributedDataParallel) else model
                loss, right = gang.total(side.eval_sums(module, feed.val_batches(side.eval_batch_size))).tolist()
                return loss / feed.total_val, int(right) / feed.total_val

            parts.update(data=feed, evaluate=evaluate)
        return super()._context(trial, rank=gang.rank, world_size=gang.world, wrap=gang.wrap, **parts)

    def _train(self, ctx: TrialContext) -> Any:
        self.clean = False
        try:
            returned = self.train(ctx)
        except RuntimeError as e:
            if collective_error(e):  # (inside DDP's backward, say): the gang's failure, not the candidate's
                raise TrialFailure(FailureKind.COLLECTIVE,
                                   f"rank {self.gang.rank}: a collective failed: {first_line(e)}") from e
            raise
        self.clean = True
        return returned

    def _outcome(self, ctx: TrialContext, returned: Any, measured: dict[str, Any], keep: Keep
                 ) -> tuple[Result, bytes | None]:
        if self.gang.rank == 0:
            return super()._outcome(ctx, returned, {**measured, "ranks": self.gang.world}, keep)
        outcome = {Decision.STOP: Outcome.STOPPED, Decision.PAUSE: Outcome.PAUSED}.get(ctx.decision, Outcome.COMPLETE)
        epoch = ctx.history[-1]["epoch"] if ctx.history else 0
        return Result(ctx.trial.trial_id, outcome, epoch=epoch, history=list(ctx.history)), None  # (not sent on)


__all__ = ["Gang", "GangRunner", "loopback_interface"]
