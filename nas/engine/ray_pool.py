"""The Ray executor: a fixed pool of named trainer actors, one trial at a time each.

The dataset and the space go into the object store once and every actor reads them from there.
Each actor keeps a trainer (and so the data as tensors, on its GPU where it has one) for its whole
life: starting an actor costs about a second, a trial on a warm actor costs a couple of milliseconds.
Checkpoints stay in the object store; the driver only holds references, and a trial with
``checkpoint_from`` receives the referenced state directly from the store.

A worker that dies mid-trial (process killed, node lost) is replaced and its trial resubmitted, up to
``max_retries`` times; after that the trial is recorded as FAILED and the search goes on. Ray places
the replacement on a live node. A replacement that cannot be placed never hangs the search: when the
cluster no longer has the resources for the whole pool (a node left), or the replacement is not up
within ``start_timeout`` seconds, or it dies while starting, its slot is retired and the pool shrinks;
its trial waits for the next free slot. Only when no slot is left does the search stop, with an error.

Each trial is a plain call on its actor (:meth:`TrainerActor.take`, numbered per actor so that the actor runs them
in the order they were sent) that returns when the trial ends, with its result and the reports that came with it: a
trivial trial costs the driver one remote call. What a trial says while it trains goes out on the actor's ONE
streaming generator, started once for its life (:meth:`TrainerActor.stream`): its reports, one per epoch as it
trains (those ready together as one item), and where a checkpoint is kept, a note that the next item is its bytes
(they stay in the object store, owned by the driver). The result says how many messages of its trial went by the
stream, so a trial ends only once they are in. The ``started`` event (QUEUED to RUNNING) costs no message: a trial
sent to an idle worker starts at once, and one queued behind another (prefetch) starts when that one ends. The
driver's STOP or PAUSE goes back by an actor method in a concurrency group of its own (``decide``; ``cancel`` for a
trial queued behind another), which the training thread hears at its next report; at a scheduler's rungs the worker
waits for the answer. The driver never scans what is in flight: a callback on each trial's call and on the next item
of each actor's stream puts it into a queue, and ``poll`` takes only what that queue holds (O(events)). No generator
or thread is made per trial; ``nas bench ray-poll`` measures the cost per trial against a batched ``ray.wait``, side
by side (docs/ray-path.md).

The parts: :mod:`nas.engine.ray_workers` (the actors and their slots: starting, replacing, retiring),
:mod:`nas.engine.ray_calls` (the trials' calls and the actors' streams turned into events, in order),
:mod:`nas.engine.retries` (trials waiting to run again after their worker died); this module puts them behind the
Executor Protocol.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import queue
import time
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

import ray

from nas.core.objectives import Objectives
from nas.core.registry import register_executor
from nas.core.types import Decision, FailureKind, Outcome, Result, Trial
from nas.engine.inprocess import DECISION_OF
from nas.engine.protocol import (
    BoundedCheckpoints,
    Event,
    ExecutorConfig,
    KeepRule,
    PrefetchRule,
    TrainFn,
    prefetch_mode,
)
from nas.engine.ray_calls import TrialCalls
from nas.engine.ray_workers import TrainerPool
from nas.engine.retries import Retries, Retry
from nas.engine.trainer_actor import fetch_checkpoint

if TYPE_CHECKING:
    from nas.core.space import SearchSpace
    from nas.train.data import Dataset
    from nas.train.settings import TrainSettings

log = logging.getLogger(__name__)


@register_executor("ray")
class RayExecutor:
    """Options: ``workers`` (actors in the pool), ``cpus_per_trial`` (fractional: 0.03 packs many light
    actors on a core), ``gpus_per_trial`` (fractional: 0.25 packs four trials on one GPU; with no GPU in
    the cluster the run falls back to CPUs and says so), ``max_retries`` (resubmissions of a trial whose
    worker died), ``namespace`` for the actor names, ``start_timeout`` (seconds a worker may take to be
    placed and start before its slot is retired), ``prefetch``.

    Prefetch (a second trial queued at a worker behind the one it runs, QUEUED until it begins) follows
    :class:`nas.engine.protocol.PrefetchRule` with ``prefetch="auto"`` (the default): it is on while the
    median trial duration measured on the workers is below 20 x the measured round trip (a ping to an
    actor plus the driver's own time from handing out a result to submitting the next trial: journal,
    tell, ask), so short trials never leave a worker waiting for the driver, and off for trials that take
    minutes, where a queued trial would only make the strategy decide on stale results. True or False
    forces it. ``train``: the training function every trial runs (default: the built-in one)."""

    needs_ray = True  # nas.search connects to Ray before building it

    def __init__(
        self,
        space: SearchSpace | None,
        data: Dataset | None,
        settings: TrainSettings | None = None,
        *,
        workers: int = 2,
        train: TrainFn | None = None,
        cpus_per_trial: float = 1.0,
        gpus_per_trial: float = 0.0,
        max_retries: int = 2,
        name_prefix: str = "nas-trainer",
        namespace: str | None = None,
        start_timeout: float = 120.0,
        prefetch: bool | str | int = "auto",
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.prefetch = PrefetchRule(prefetch_mode(prefetch))
        if not 0 < cpus_per_trial < float("inf"):
            raise ValueError(f"cpus_per_trial must be a finite number > 0, got {cpus_per_trial}")
        if gpus_per_trial < 0 or (gpus_per_trial > 1 and not float(gpus_per_trial).is_integer()):
            raise ValueError(f"gpus_per_trial must be a fraction in [0, 1] or a whole number, got {gpus_per_trial}")
        if not ray.is_initialized():
            raise RuntimeError("RayExecutor needs Ray: call ray.init() (or nas.connect()) first")
        cluster = ray.cluster_resources()
        self.fallback_to_cpu = gpus_per_trial > 0 and cluster.get("GPU", 0) == 0
        if self.fallback_to_cpu:
            measured = Objectives(list(settings.objectives)).metrics if settings is not None else ()
            if train is None and data is not None and "peak_memory_mb" in measured:  # (the built-in trainer's:
                raise ValueError("objective 'peak_memory_mb' is measured on a GPU only, and this Ray cluster has "
                                 "none, so every trial would train on a CPU: leave it out, or run the trials on GPUs")
            log.warning("no GPU in the Ray cluster: gpus_per_trial=%s ignored, training on CPUs",  # every trial
                        gpus_per_trial)  # failed OBJECTIVE_MISSING)
            gpus_per_trial = 0.0
        if workers * cpus_per_trial > cluster.get("CPU", 0) + 1e-9:
            raise ValueError(
                f"{workers} workers x {cpus_per_trial:g} CPUs need {workers * cpus_per_trial:g} CPUs, "
                f"the Ray cluster has {cluster.get('CPU', 0):g}"
            )
        self.space = space
        self.settings = settings
        self.cpus_per_trial, self.gpus_per_trial = cpus_per_trial, gpus_per_trial
        if settings is not None:
            if gpus_per_trial == 0 and settings.device == "auto":  # Ray leaves every GPU visible to an
                self.settings = dataclasses.replace(settings, device="cpu")  # actor that asked for none
            if gpus_per_trial == 0 and settings.device == "cuda":
                raise ValueError("device='cuda' needs a GPU per trial: pass gpus_per_trial > 0 (--gpus-per-trial) "
                                 "on a Ray cluster with GPUs")
        self.max_retries = max_retries
        self.name_prefix = name_prefix
        self.namespace = namespace  # names are unique per namespace: one per run lets runs share a cluster
        self.checkpoints = BoundedCheckpoints(fetch=fetch_checkpoint)  # ObjectRefs; fetched only when used
        self._retry = Retries()
        self._done: list[Event] = []  # stopped while waiting: returned by the next poll
        self._handed_out: float | None = None  # when poll last returned a finished trial (round-trip probe)
        inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()  # news of calls and streams (None: a wake-up)
        self._inbox = inbox
        self.pool = TrainerPool(  # the data and the space go into the object store once: every actor reads that copy
            workers, space_ref=ray.put(space), data_ref=ray.put(data), settings=self.settings, train=train,
            cpus=cpus_per_trial, gpus=gpus_per_trial, name_prefix=name_prefix, namespace=namespace,
            start_timeout=start_timeout, wake=lambda: inbox.put(None))
        self.calls = TrialCalls(self.pool, inbox, self.checkpoints, self.prefetch, self._retry, max_retries,
                                settings.trial_timeout if settings is not None else None)
        for i in range(workers)[::-1]:
            self.calls.open(i)
        t0 = time.perf_counter()
        ray.get(self.pool.actors[0].info.remote())
        self._ping = time.perf_counter() - t0  # the transport's share of a round trip

    @classmethod
    def from_config(cls, cfg: ExecutorConfig) -> Any:
        if cfg.trial_workers > 1:  # data-parallel trials: gangs of actors (nas.engine.gang_executor)
            from nas.engine.gang_executor import GangExecutor

            return GangExecutor.from_config(cfg)
        opts = cfg.checked_options("ray")
        return cls(cfg.space, cfg.data, cfg.settings, workers=cfg.workers, train=cfg.train,
                   cpus_per_trial=cfg.cpus_per_trial, gpus_per_trial=cfg.gpus_per_trial, max_retries=cfg.max_retries,
                   namespace=cfg.namespace, **opts)

    @property
    def slots(self) -> int:
        """Workers in the pool (retired slots excluded)."""
        return self.pool.slots

    @property
    def start_timeout(self) -> float:
        """Seconds a replacement worker may take to be placed and start before its slot is retired."""
        return self.pool.start_timeout

    @start_timeout.setter
    def start_timeout(self, seconds: float) -> None:
        self.pool.start_timeout = seconds

    @property
    def retired(self) -> list[int]:
        """Slots whose worker was lost and could not be replaced."""
        return self.pool.retired

    @property
    def restarts(self) -> int:
        """Workers replaced."""
        return self.pool.restarts

    @property
    def stream_items(self) -> int:
        """Items read from the actors' streams (a trivial trial makes none)."""
        return self.calls.stream_items

    @property
    def actor_names(self) -> list[str]:
        return list(self.pool.names)

    def actor(self, i: int) -> Any:
        return self.pool.actors[i]

    def free_slots(self) -> int:
        self.pool.check()
        return max(0, self.pool.count(self.prefetch.on) - len(self._retry))

    def in_flight(self) -> int:
        return len(self.calls.running) + len(self._retry)

    def now(self) -> float | None:
        return None

    def submit(self, trial: Trial, *, keep: KeepRule, wait_epochs: Collection[int] = (), attempt: int = 0) -> None:
        slot = self.pool.take(self.prefetch.on)
        if self._handed_out is not None:  # the driver's share of the round trip: journal, tell, ask
            self.prefetch.observe_round_trip(self._ping + time.perf_counter() - self._handed_out)
            self._handed_out = None
        try:
            sources = (self.checkpoints.handle(trial.checkpoint_from), self.checkpoints.inheritable(trial.inherit_from))
        except KeyError as e:  # evicted, or lost with a driver crash: the trial cannot start from it
            self.pool.put_back(slot)
            failed = Result.failed(trial.trial_id, str(e.args[0]), FailureKind.CHECKPOINT_MISSING)
            self._done.append(Event.finished(trial, failed))
            return
        if self.calls.send(slot, trial, sources, keep, frozenset(wait_epochs), attempt):  # the worker takes it at once
            self._done.append(Event.started(trial, time=time.time(), worker=self.pool.names[slot]))

    def stop(self, trial_id: int, outcome: Outcome) -> None:
        """STOPPED or PAUSED: the worker ends the trial at its report (at once where it waits for the answer);
        CANCELLED: a trial queued at its worker ends without training, a running one at its next report, both
        without a result."""
        run = self.calls.running.get(trial_id)
        self.calls.awaiting.pop(trial_id, None)
        if run is not None:
            if outcome is Outcome.CANCELLED:
                self.calls.cancelled.add(trial_id)
                run.stream.actor.cancel.remote(run.number, trial_id)
            else:
                run.stream.actor.decide.remote(trial_id, DECISION_OF[outcome])
        if outcome is Outcome.CANCELLED:
            self._done += self._retry.cancel(trial_id)

    def poll(self, timeout: float | None = None) -> list[Event]:
        """The events that arrived, in order, waiting at most ``timeout`` seconds for the first. Costs
        O(events), whatever the number of trials in flight. A worker waiting at a rung for the answer to
        its report, which the loop did not stop or pause, goes on now."""
        for trial_id, actor in self.calls.awaiting.items():
            actor.decide.remote(trial_id, Decision.CONTINUE)
        self.calls.awaiting.clear()
        out, self._done = self._done, []
        self._check_starting()
        self._dispatch_retries()
        deadline = self.pool.next_deadline()
        due = self.calls.time_out(time.monotonic())  # (a trial past its timeout: its worker stopped)
        if due is not None:  # (monotonic, as the pool's deadlines)
            deadline = due if deadline is None else min(deadline, due)
        if not self.calls.running and deadline is None:
            if self._retry:
                self.pool.check()
            return out
        if deadline is not None:  # wake up in time to retire a worker that does not start
            until = deadline - time.monotonic()
            timeout = max(0.0, until if timeout is None else min(timeout, until))
        news = []
        with contextlib.suppress(queue.Empty):
            news.append(self._inbox.get(block=not out, timeout=timeout))
            while True:
                news.append(self._inbox.get_nowait())
        out += self.calls.take_news(news)
        if any(e.result is not None for e in out):
            self._handed_out = time.perf_counter()
        self._check_starting()
        self._dispatch_retries()
        return out

    def _check_starting(self) -> None:
        for slot in self.pool.check_starting():
            self.calls.open(slot)

    def _dispatch_retries(self) -> None:
        def resubmit(r: Retry) -> None:
            self.submit(r.trial, keep=r.keep, wait_epochs=r.wait_epochs, attempt=r.attempt)

        self._retry.dispatch(lambda: self.pool.has_room(self.prefetch.on), resubmit)

    def shutdown(self) -> None:
        self.pool.shutdown()
        self.calls.clear()
        self._retry.clear()

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
