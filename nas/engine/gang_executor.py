"""The data-parallel executor: trials trained by warm gangs of Ray actors, each gang one candidate at a time.

``workers`` gangs of ``trial_workers`` ranks (:class:`nas.engine.gang_actor.GangMember`, named
``nas-gang-<g>-rank-<r>``). Each gang's ranks are placed by one placement group (``gang_strategy``: PACK, the default,
keeps them on as few nodes as will hold them; SPREAD puts them on as many; STRICT_PACK and STRICT_SPREAD insist)
with ``cpus_per_trial`` CPUs and ``gpus_per_trial`` GPUs per rank. A gang starts once: its ranks get the data onto
their devices and join one torch.distributed process group (gloo on CPUs, NCCL where each rank has a whole GPU),
which every trial it runs then uses, so a trial on a warm gang starts in milliseconds where a per-trial Ray Train
start takes seconds (``nas bench gang`` measures both). The loop sees a gang as one slot: ``free_slots()`` counts
free gangs, so a trial is submitted only when a whole gang is free. No prefetch.

A trial is one task per rank (:mod:`nas.train.gang` says what each rank does): rank 0's stream brings the trial's
start, its reports (the loop's STOP or PAUSE goes back to rank 0, which hands it to every rank at the same epoch),
its checkpoint and its result. Faults, none of which hangs the search:

- a rank dies (its process killed, its node gone): the gang is torn down and rebuilt (Ray places the new one
  where the resources are) and the trial runs again from the checkpoint it started from, up to ``max_retries``
  times, then it is FAILED (WORKER_LOST);
- a rank's training fails where the others' does not (an exception on one rank): the trial is FAILED with that
  rank's typed reason at once, and the gang rebuilt;
- a rank stops answering: the others' next collective fails after ``collective_timeout`` seconds; the gang is
  rebuilt and the trial retried as for a dead rank, then FAILED (COLLECTIVE). (When a rank dies, its peers'
  collectives fail too: whichever the driver hears first, the trial loses one attempt; once none is left, a rank
  found dead is what the trial failed of, WORKER_LOST naming it.)

A gang that cannot be rebuilt (the cluster no longer has room for every gang, or the new one is not up within
``start_timeout``) is retired and the search goes on with the rest; with none left it stops with an error. The
gangs' lifecycle is :mod:`nas.engine.gang_pool`'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import queue
import time
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

import ray
import ray.exceptions

from nas.core.types import Decision, FailureKind, Outcome, Report, Result, Trial
from nas.engine.gang_actor import Began, GangEnded, RankEnd
from nas.engine.gang_pool import Gang, GangPool, GangSpec, check_placeable
from nas.engine.inprocess import DECISION_OF
from nas.engine.protocol import GANG_STRATEGIES, BoundedCheckpoints, Event, ExecutorConfig, KeepRule, TrainFn
from nas.engine.retries import Retries, Retry
from nas.engine.trainer_actor import CheckpointNext, fetch_checkpoint

if TYPE_CHECKING:
    from nas.core.space import SearchSpace
    from nas.train.data import Dataset
    from nas.train.settings import TrainSettings

log = logging.getLogger(__name__)


@dataclasses.dataclass
class _Run:
    serial: int  # this submission (a promoted trial is submitted again under its id)
    trial: Trial
    gang: Gang
    attempt: int
    keep: KeepRule
    wait_epochs: frozenset[int]
    gen: Any  # rank 0's ObjectRefGenerator
    followers: dict[int, Any]  # rank -> future of its RankEnd, until it is in
    item: Any = None  # future of rank 0's next stream item
    ckpt_ref: Any = None
    consume: int = 1
    ended: bool = False  # rank 0's result is out
    clean: bool = True


#: seconds a gang's ranks have to answer whether they are alive, once a trial has failed for good on a collective
PING = 5.0

class GangExecutor:
    """See the module docstring. ``collective_timeout``: seconds a rank's collective waits for the others."""

    registered_as = "ray"  # the registered executor that builds it (trial_workers > 1): run.json records that

    needs_ray = True

    def __init__(self, space: SearchSpace | None, data: Dataset | None, settings: TrainSettings | None = None, *,
                 workers: int = 1, trial_workers: int = 2, gang_strategy: str = "PACK", train: TrainFn | None = None,
                 cpus_per_trial: float = 1.0, gpus_per_trial: float = 0.0, max_retries: int = 2,
                 name_prefix: str = "nas-gang", namespace: str | None = None, start_timeout: float = 120.0,
                 collective_timeout: float = 300.0) -> None:
        for name, value in (("workers", workers), ("trial_workers", trial_workers)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if str(gang_strategy).upper() not in GANG_STRATEGIES:
            raise ValueError(f"gang_strategy must be one of {', '.join(GANG_STRATEGIES)}; got {gang_strategy!r}")
        if not cpus_per_trial > 0 or not collective_timeout > 0:
            raise ValueError(f"cpus_per_trial and collective_timeout must be > 0, got {cpus_per_trial!r}, "
                             f"{collective_timeout!r}")
        if gpus_per_trial < 0 or (gpus_per_trial > 1 and not float(gpus_per_trial).is_integer()):
            raise ValueError(f"gpus_per_trial must be a fraction in [0, 1] or a whole number, got {gpus_per_trial}")
        if not ray.is_initialized():
            raise RuntimeError("GangExecutor needs Ray: call ray.init() (or nas.connect()) first")
        cluster = ray.cluster_resources()
        if gpus_per_trial > 0 and cluster.get("GPU", 0) == 0:
            log.warning("no GPU in the Ray cluster: gpus_per_trial=%s ignored, training on CPUs", gpus_per_trial)
            gpus_per_trial = 0.0
        if settings is not None and gpus_per_trial == 0:
            if settings.device == "cuda":
                raise ValueError("device='cuda' needs a GPU per rank: pass gpus_per_trial > 0 (--gpus-per-trial)")
            settings = dataclasses.replace(settings, device="cpu")  # (Ray leaves every GPU visible to such an actor)
        self.trial_workers, self.gang_strategy = trial_workers, str(gang_strategy).upper()
        self.backend = "nccl" if gpus_per_trial >= 1 else "gloo"  # NCCL wants a GPU per rank; gloo takes shares
        spec = GangSpec(trial_workers, self.gang_strategy, float(cpus_per_trial), float(gpus_per_trial), self.backend,
                        collective_timeout, (ray.put(space), ray.put(data), settings, train),  # (once, in the store)
                        name_prefix=name_prefix, namespace=namespace)
        need_cpu, need_gpu = spec.needs(workers)
        if need_cpu > cluster.get("CPU", 0) + 1e-9 or need_gpu > cluster.get("GPU", 0) + 1e-9:
            raise ValueError(f"{workers} gangs x {trial_workers} ranks need {need_cpu:g} CPUs and {need_gpu:g} GPUs, "
                             f"the Ray cluster has {cluster.get('CPU', 0):g} and {cluster.get('GPU', 0):g}")
        check_placeable(spec)
        self.space, self.max_retries = space, max_retries
        self._inbox: queue.SimpleQueue[tuple[int, int]] = queue.SimpleQueue()  # (serial, rank); (-1, -1): wake up
        self._runs: dict[int, _Run] = {}  # serial -> run, until every rank's part is in
        self._running: dict[int, _Run] = {}  # trial id -> run, until its result is out
        self._serials = itertools.count()
        self._retry = Retries()
        self._done: list[Event] = []
        self._cancelled: set[int] = set()
        self._awaiting: dict[int, Any] = {}  # trial id -> rank 0 waiting at a rung for the loop's answer
        self.checkpoints = BoundedCheckpoints(fetch=fetch_checkpoint)  # ObjectRefs; fetched only when used
        inbox = self._inbox
        self.pool = GangPool(workers, spec, start_timeout=start_timeout, wake=lambda: inbox.put((-1, -1)))

    @classmethod
    def from_config(cls, cfg: ExecutorConfig) -> GangExecutor:
        opts = cfg.checked_options("ray")
        if cfg.settings is not None and cfg.settings.trial_timeout is not None:  # (nas.search refuses it before)
            raise ValueError(f"trial_timeout ({cfg.settings.trial_timeout!r} s) is not enforced on data-parallel "
                             f"gangs (--trial-workers {cfg.trial_workers}) yet: leave it out, or train each trial on "
                             "one worker")
        return cls(cfg.space, cfg.data, cfg.settings, workers=cfg.workers, trial_workers=cfg.trial_workers,
                   gang_strategy=cfg.gang_strategy, train=cfg.train, cpus_per_trial=cfg.cpus_per_trial,
                   gpus_per_trial=cfg.gpus_per_trial, max_retries=cfg.max_retries, namespace=cfg.namespace, **opts)

    @property
    def slots(self) -> int:
        """Gangs (retired ones excluded): trials that run at once."""
        return self.pool.slots

    @property
    def restarts(self) -> int:
        """Gangs torn down and started again."""
        return self.pool.restarts

    @property
    def retired(self) -> list[int]:
        return self.pool.retired

    def gang(self, g: int) -> list[Any]:
        """The actors of gang ``g``, in rank order (empty when retired)."""
        gang = self.pool.gangs[g]
        return list(gang.actors) if gang is not None else []

    def _check_pool(self) -> None:
        if self.slots == 0:
            s = self.pool.spec
            raise RuntimeError(f"every gang was lost and none could be rebuilt ({len(self.retired)} retired): the Ray "
                               f"cluster has no room left for {s.ranks} ranks of {s.cpus:g} CPUs / {s.gpus:g} GPUs")

    def free_slots(self) -> int:
        self._check_pool()
        return max(0, len(self.pool.free) - len(self._retry))

    def in_flight(self) -> int:
        return len(self._running) + len(self._retry)

    def now(self) -> float | None:
        return None

    def submit(self, trial: Trial, *, keep: KeepRule, wait_epochs: Collection[int] = (), attempt: int = 0) -> None:
        if not self.pool.free:
            raise RuntimeError("no free gang: submit only when free_slots() > 0")
        gang = self.pool.take()
        try:
            source = self.checkpoints.handle(trial.checkpoint_from)
            inherit = self.checkpoints.inheritable(trial.inherit_from)
        except KeyError as e:  # evicted, or lost with a driver crash: the trial cannot start from it
            self.pool.release(gang)
            self._done.append(Event.finished(trial, Result.failed(trial.trial_id, str(e.args[0]),
                                                                  FailureKind.CHECKPOINT_MISSING)))
            return
        waits = frozenset(wait_epochs)
        gen = gang.actors[0].lead.options(num_returns="streaming", name=f"trial-{trial.trial_id}").remote(
            trial, source, inherit, keep, waits)
        followers = {r: a.follow.options(name=f"trial-{trial.trial_id}-rank-{r}").remote(trial, source, inherit)
                     for r, a in enumerate(gang.actors[1:], 1)}
        run = _Run(next(self._serials), trial, gang, attempt, keep, waits, gen, {})
        self._runs[run.serial] = self._running[trial.trial_id] = run
        self._watch(run)
        inbox = self._inbox
        for r, ref in followers.items():
            run.followers[r] = fut = ref.future()
            fut.add_done_callback(lambda _, r=r, s=run.serial: inbox.put((s, r)))

    def _watch(self, run: _Run, skip: int = 0) -> None:
        """A callback when rank 0's next stream item is in (after ``skip`` items, not fetched: the checkpoint)."""
        refs = run.gen._get_next_ref_n(skip + 1)
        if skip:
            run.ckpt_ref = refs[0]
        run.consume = skip + 1
        run.item = refs[-1].future()
        serial, inbox = run.serial, self._inbox
        run.item.add_done_callback(lambda _: inbox.put((serial, 0)))

    def stop(self, trial_id: int, outcome: Outcome) -> None:
        """STOPPED or PAUSED: every rank ends the trial at its next report (at once where it waits for the answer);
        CANCELLED: the same, and it ends without a result."""
        run = self._running.get(trial_id)
        self._awaiting.pop(trial_id, None)
        if run is not None:
            run.gang.actors[0].decide.remote(trial_id, DECISION_OF[outcome])
            if outcome is Outcome.CANCELLED:
                self._cancelled.add(trial_id)
        if outcome is Outcome.CANCELLED:
            self._done += self._retry.cancel(trial_id)

    def poll(self, timeout: float | None = None) -> list[Event]:
        """The events that arrived, in order, waiting at most ``timeout`` seconds for the first."""
        for trial_id, actor in self._awaiting.items():
            actor.decide.remote(trial_id, Decision.CONTINUE)
        self._awaiting.clear()
        out, self._done = self._done, []
        self.pool.check_starting()
        self._dispatch_retries()
        deadline = self.pool.next_deadline()
        if not self._runs and deadline is None:
            if self._retry:
                self._check_pool()
            return out
        if deadline is not None:  # wake up in time to retire a gang that does not start
            until = deadline - time.monotonic()
            timeout = max(0.0, until if timeout is None else min(timeout, until))
        messages = []
        with contextlib.suppress(queue.Empty):
            messages.append(self._inbox.get(block=not out, timeout=timeout))
            while True:
                messages.append(self._inbox.get_nowait())
        for serial, rank in messages:
            run = self._runs.get(serial)
            if run is not None:
                out += self._take_lead(run) if rank == 0 else self._take_follower(run, rank)
        self.pool.check_starting()
        self._dispatch_retries()
        return out

    def _take_lead(self, run: _Run) -> list[Event]:
        try:
            item = run.item.result()
        except (ray.exceptions.RayError, RuntimeError) as e:
            return self._fault(run, 0, e)
        run.gen._consume_next_ref_n(run.consume)
        if isinstance(item, Began):
            self._watch(run)
            return [Event.started(run.trial, time=item.time, worker=self.pool.spec.names(run.gang.index)[0])]
        if isinstance(item, Report):
            if item.epoch in run.wait_epochs:
                self._awaiting[run.trial.trial_id] = run.gang.actors[0]
            self._watch(run)
            return [Event.reported(run.trial, item)]
        if isinstance(item, CheckpointNext):
            self._watch(run, skip=1)
            return []
        assert isinstance(item, GangEnded)
        result = item.result
        if result.failure is FailureKind.COLLECTIVE:  # a rank died or stopped answering: the gang's fault
            return self._lost(run, 0, result)
        result.metrics["nodes"] = list(run.gang.nodes)  # where each rank ran
        self._forget(run)
        run.ended, run.clean = True, item.clean
        if result.ok:
            self.checkpoints.put(run.trial.trial_id, run.ckpt_ref)
        self._settle(run)
        return [Event.finished(run.trial, self._cancelled_or(run.trial, result))]

    def _take_follower(self, run: _Run, rank: int) -> list[Event]:
        try:
            end: RankEnd = run.followers.pop(rank).result()
        except (ray.exceptions.RayError, RuntimeError) as e:
            return self._fault(run, rank, e)
        if not end.clean:
            run.clean = False
            if not run.ended:  # its training failed where rank 0's goes on: the trial fails with its reason
                kind = FailureKind(end.failure) if end.failure else FailureKind.ERROR
                failed = Result.failed(run.trial.trial_id, f"rank {rank}: {end.error}", kind,
                                       worker=self.pool.spec.names(run.gang.index)[rank])
                return self._lost(run, rank, failed) if kind is FailureKind.COLLECTIVE else self._end(run, failed)
        self._settle(run)
        return []

    def _fault(self, run: _Run, rank: int, e: BaseException) -> list[Event]:
        """Rank ``rank``'s task failed: it died (the trial is retried), or its task ended without a result."""
        name = self.pool.spec.names(run.gang.index)[rank]
        if run.ended:  # the result is out already: only the gang needs mending
            run.clean = False
            self._settle(run)
            return []
        trial = run.trial
        if isinstance(e, ray.exceptions.RayActorError | ray.exceptions.ObjectLostError):
            return self._lost(run, rank, self._died(run, rank, str(e)))
        return self._end(run, Result.failed(trial.trial_id, f"{name}: {type(e).__name__}: {e}", worker=name))

    def _died(self, run: _Run, rank: int, why: str) -> Result:
        name = self.pool.spec.names(run.gang.index)[rank]
        return Result.failed(run.trial.trial_id, f"{name} died; the trial ran {run.attempt + 1} times: {why}",
                             FailureKind.WORKER_LOST, worker=name)

    def _dead_rank(self, run: _Run) -> int | None:
        """The rank of ``run``'s gang that is dead, where one is: a collective fails on every rank when one dies, and
        the driver may hear of that before of the death. A rank that answers within :data:`PING` seconds, or does
        not answer (hung, not dead: a COLLECTIVE failure), is alive."""
        calls = [actor.info.remote() for actor in run.gang.actors]  # (the monitor group answers while it trains)
        ready, _ = ray.wait(calls, num_returns=len(calls), timeout=PING)
        for rank, call in enumerate(calls):
            if call in ready:
                try:
                    ray.get(call)
                except ray.exceptions.RayActorError:
                    return rank
        return None

    def _lost(self, run: _Run, rank: int, failed: Result) -> list[Event]:
        """The gang lost the trial (rank ``rank`` died, or a collective failed: a peer died or stopped answering):
        it is rebuilt, and the trial runs again while retries are left, else ends ``failed``. (When a rank dies
        the driver may hear first of its death or of its peer's failed collective: either way, one attempt.)"""
        trial, name = run.trial, self.pool.spec.names(run.gang.index)[rank]
        if trial.trial_id in self._cancelled or run.attempt >= self.max_retries:
            if failed.failure is FailureKind.COLLECTIVE and (dead := self._dead_rank(run)) is not None:
                failed = self._died(run, dead, f"its peers' collective failed first: {failed.error}")
            return self._end(run, failed)
        log.warning("trial %d lost its gang (%s: %s); the gang is rebuilt and the trial retried", trial.trial_id,
                    name, (failed.error or "").splitlines()[0])
        self._forget(run)
        self._drop(run)
        self._retry.add(trial, run.attempt + 1, run.keep, run.wait_epochs)
        return [Event.requeued(trial, worker=name)]

    def _end(self, run: _Run, result: Result) -> list[Event]:
        """End the trial with ``result`` before every rank is done: the gang is rebuilt."""
        self._forget(run)
        self._drop(run)
        return [Event.finished(run.trial, self._cancelled_or(run.trial, result))]

    def _cancelled_or(self, trial: Trial, result: Result) -> Result:
        if trial.trial_id in self._cancelled:
            self._cancelled.discard(trial.trial_id)
            return Result.cancelled(trial.trial_id, worker=result.worker)
        return result

    def _forget(self, run: _Run) -> None:
        """The trial's result is out (or it waits to run again): the loop no longer waits on this run."""
        if self._running.get(run.trial.trial_id) is run:
            del self._running[run.trial.trial_id]
        self._awaiting.pop(run.trial.trial_id, None)

    def _settle(self, run: _Run) -> None:
        """Once rank 0's result is out and every rank is done the gang is free; one out of step is rebuilt at once."""
        if not run.clean:
            self._drop(run)
        elif run.ended and not run.followers:
            del self._runs[run.serial]
            self.pool.release(run.gang)

    def _drop(self, run: _Run) -> None:
        self._runs.pop(run.serial, None)
        self.pool.rebuild(run.gang)

    def _dispatch_retries(self) -> None:
        def resubmit(r: Retry) -> None:
            self.submit(r.trial, keep=r.keep, wait_epochs=r.wait_epochs, attempt=r.attempt)

        self._retry.dispatch(lambda: bool(self.pool.free), resubmit)

    def shutdown(self) -> None:
        self.pool.shutdown()
        self._runs.clear()
        self._running.clear()
        self._retry.clear()

    def __enter__(self) -> GangExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()



__all__ = ["GangExecutor"]
