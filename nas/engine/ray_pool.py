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
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import queue
import time
from collections import deque
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

import ray
import ray.exceptions

from nas.core.registry import register_executor
from nas.core.types import Decision, FailureKind, Outcome, Report, Result, Trial
from nas.engine.inprocess import DECISION_OF
from nas.engine.protocol import BoundedCheckpoints, Event, ExecutorConfig, KeepRule, PrefetchRule, TrainFn
from nas.engine.trainer_actor import CheckpointNext, Ended, TrainerActor, fetch_checkpoint

if TYPE_CHECKING:
    from nas.core.space import SearchSpace
    from nas.train.data import Dataset
    from nas.train.settings import TrainSettings

log = logging.getLogger(__name__)


@dataclasses.dataclass(slots=True)
class _Stream:
    """One worker's stream and the trials it holds, the running one first."""

    slot: int
    actor: Any
    gen: Any  # the actor's ObjectRefGenerator
    trials: deque[int] = dataclasses.field(default_factory=deque)
    sent: int = 0  # trials handed to the actor (the next one's number)
    item: Any = None  # future of the stream's next item, filled on Ray's thread
    consume: int = 1  # stream items read once the watched one is in


@dataclasses.dataclass(slots=True)
class _Running:
    trial: Trial
    stream: _Stream  # its worker's stream (a slot's worker may have been replaced since)
    attempt: int
    keep: KeepRule
    wait_epochs: frozenset[int]  # where its worker waits for the loop's answer (rungs)
    started: bool
    number: int = 0  # its number on its worker (the worker runs them in this order)
    ref: Any = None  # its take call's return: an Ended
    future: Any = None  # ... as a future, filled on Ray's thread
    streamed: int = 0  # its messages read from the stream
    ended: Ended | None = None  # its take call's return, once in
    ckpt_ref: Any = None  # its checkpoint's reference, once announced (never fetched here)


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
        if isinstance(prefetch, int) and not isinstance(prefetch, bool):
            if prefetch not in (0, 1):
                raise ValueError(f"prefetch must be 'auto', True/1 or False/0, got {prefetch}")
            prefetch = bool(prefetch)
        self.prefetch = PrefetchRule(prefetch)
        if cpus_per_trial <= 0:
            raise ValueError(f"cpus_per_trial must be > 0, got {cpus_per_trial}")
        if gpus_per_trial < 0 or (gpus_per_trial > 1 and not float(gpus_per_trial).is_integer()):
            raise ValueError(f"gpus_per_trial must be a fraction in [0, 1] or a whole number, got {gpus_per_trial}")
        if not ray.is_initialized():
            raise RuntimeError("RayExecutor needs Ray: call ray.init() (or nas.connect()) first")
        cluster = ray.cluster_resources()
        self.fallback_to_cpu = gpus_per_trial > 0 and cluster.get("GPU", 0) == 0
        if self.fallback_to_cpu:
            log.warning("no GPU in the Ray cluster: gpus_per_trial=%s ignored, training on CPUs",
                        gpus_per_trial)
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
        self._train = train
        self._space_ref = ray.put(space)
        self._data_ref = ray.put(data)  # once: every actor reads the same copy from the store
        self._actors: list[Any] = [None] * workers
        self._names = [f"{name_prefix}-{i}" for i in range(workers)]
        # Trials each worker holds (running + queued), and the workers that hold 0 or 1 of them.
        self._load = [0] * workers
        self._streams: list[_Stream | None] = [None] * workers  # each worker's stream, once it is up
        self._free: list[dict[int, None]] = [{}, {}]
        self._running: dict[int, _Running] = {}  # trial id -> its run
        self._inbox: queue.SimpleQueue[_Stream | _Running | None] = queue.SimpleQueue()  # news (None: a wake-up)
        self._cancelled: set[int] = set()
        self.checkpoints = BoundedCheckpoints(fetch=fetch_checkpoint)  # ObjectRefs; fetched only when used
        self.restarts = 0
        self.stream_items = 0  # items read from the actors' streams (a trivial trial makes none)
        self.start_timeout = start_timeout
        self.retired: list[int] = []  # slots whose worker was lost and could not be replaced
        self._starting: dict[int, tuple[ray.ObjectRef, float]] = {}  # slot -> (ready ref, deadline)
        self._retry: deque[tuple[Trial, int, KeepRule, frozenset[int]]] = deque()  # (..., attempt, ...) for a slot
        self._done: list[Event] = []  # stopped while waiting: returned by the next poll
        self._handed_out: float | None = None  # when poll last returned a finished trial (round-trip probe)
        self._awaiting: dict[int, Any] = {}  # trial id -> actor: a report at such an epoch, not answered yet
        for i in range(workers):
            self._start_actor(i)
        self._wait_ready()
        for i in range(workers)[::-1]:
            self._open_stream(i)
        t0 = time.perf_counter()
        ray.get(self._actors[0].info.remote())
        self._ping = time.perf_counter() - t0  # the transport's share of a round trip

    @classmethod
    def from_config(cls, cfg: ExecutorConfig) -> Any:
        if cfg.trial_workers > 1:  # data-parallel trials: gangs of actors (nas.engine.gang_executor)
            from nas.engine.gang_executor import GangExecutor

            return GangExecutor.from_config(cfg)
        opts = cfg.checked_options("ray", "prefetch", "start_timeout", "name_prefix")
        return cls(cfg.space, cfg.data, cfg.settings, workers=cfg.workers, train=cfg.train,
                   cpus_per_trial=cfg.cpus_per_trial, gpus_per_trial=cfg.gpus_per_trial, max_retries=cfg.max_retries,
                   namespace=cfg.namespace, **opts)

    def _start_actor(self, i: int) -> None:
        threads = max(1, math.floor(self.cpus_per_trial))
        self._actors[i] = TrainerActor.options(  # type: ignore[attr-defined]
            name=self._names[i], namespace=self.namespace, num_cpus=self.cpus_per_trial, num_gpus=self.gpus_per_trial,
            max_concurrency=1,
        ).remote(self._names[i], self._space_ref, self._data_ref, self.settings, self._train, threads)

    def _wait_ready(self) -> None:
        """Fail fast, with the worker's own error, when the trainer cannot even start (e.g. a space
        class that the workers cannot import, or device='cuda' on a machine without one)."""
        try:
            ray.get([a.info.remote() for a in self._actors], timeout=self.start_timeout)
        except ray.exceptions.RayActorError as e:
            self.shutdown()
            raise RuntimeError(f"trainer actors failed to start: {e}") from None
        except ray.exceptions.GetTimeoutError:
            self.shutdown()
            raise RuntimeError(f"trainer actors were not placed and started within {self.start_timeout:g} s "
                               f"(start_timeout): the cluster lacks free resources for the pool") from None

    @property
    def slots(self) -> int:
        """Workers in the pool (retired slots excluded)."""
        return len(self._actors) - len(self.retired)

    @property
    def actor_names(self) -> list[str]:
        return list(self._names)

    def actor(self, i: int) -> Any:
        return self._actors[i]

    def free_slots(self) -> int:
        self._check_pool()
        free = len(self._free[0]) + (len(self._free[1]) if self.prefetch.on else 0)
        return max(0, free - len(self._retry))

    def in_flight(self) -> int:
        return len(self._running) + len(self._retry)

    def _check_pool(self) -> None:
        if self.slots == 0:
            raise RuntimeError(f"every trainer actor was lost and none could be replaced "
                               f"({len(self.retired)} slots retired): the Ray cluster has no room left for "
                               f"a worker of {self.cpus_per_trial:g} CPUs / {self.gpus_per_trial:g} GPUs")

    def _set_load(self, slot: int, load: int) -> None:
        old, self._load[slot] = self._load[slot], load
        if old < 2:
            self._free[old].pop(slot, None)
        if load < 2:
            self._free[load][slot] = None

    def _take_slot(self) -> int:
        if self._free[0]:
            return self._free[0].popitem()[0]
        if self.prefetch.on and self._free[1]:
            return self._free[1].popitem()[0]
        raise RuntimeError("no free slot: submit only when free_slots() > 0")

    def now(self) -> float | None:
        return None

    def submit(self, trial: Trial, *, keep: KeepRule, wait_epochs: Collection[int] = (), attempt: int = 0) -> None:
        slot = self._take_slot()
        if self._handed_out is not None:  # the driver's share of the round trip: journal, tell, ask
            self.prefetch.observe_round_trip(self._ping + time.perf_counter() - self._handed_out)
            self._handed_out = None
        try:
            sources = (self.checkpoints.handle(trial.checkpoint_from), self.checkpoints.handle(trial.inherit_from))
        except KeyError as e:  # evicted, or lost with a driver crash: the trial cannot start from it
            self._set_load(slot, self._load[slot])
            failed = Result.failed(trial.trial_id, str(e.args[0]), FailureKind.CHECKPOINT_MISSING)
            self._done.append(Event.finished(trial, failed))
            return
        idle = self._load[slot] == 0
        self._set_load(slot, self._load[slot] + 1)
        stream = self._streams[slot]
        assert stream is not None
        run = self._running[trial.trial_id] = _Running(trial, stream, attempt, keep, frozenset(wait_epochs), idle)
        run.number, stream.sent = stream.sent, stream.sent + 1
        # (the checkpoints travel inside a tuple: the actor fetches them, so a lost one fails this trial alone)
        run.ref = stream.actor.take.remote(run.number, trial, sources, keep, run.wait_epochs)
        run.future, inbox = run.ref.future(), self._inbox
        run.future.add_done_callback(lambda _: inbox.put(run))
        stream.trials.append(trial.trial_id)
        if idle:  # the worker takes it at once
            self._done.append(Event.started(trial, time=time.time(), worker=self._names[slot]))

    def _open_stream(self, slot: int) -> None:
        """Start the worker's one stream (its worker is up) and list the worker as free."""
        actor = self._actors[slot]
        gen = actor.stream.options(num_returns="streaming", name="stream").remote()
        stream = self._streams[slot] = _Stream(slot, actor, gen)
        self._watch(stream)
        self._load[slot] = 0
        self._set_load(slot, 0)

    def _watch(self, stream: _Stream, ckpt_of: _Running | None = None) -> None:
        """A callback (on Ray's thread, which also fetches the small value) when the next item of the
        worker's stream is in (after the checkpoint of ``ckpt_of``, not fetched: its reference goes to that trial):
        poll reads only what these callbacks (and those on the trials' calls) queue."""
        skip = int(ckpt_of is not None)
        refs = stream.gen._get_next_ref_n(skip + 1)
        if ckpt_of is not None:
            ckpt_of.ckpt_ref = refs[0]
        stream.consume = skip + 1  # the stream is read up to the watched item once it is in
        stream.item = refs[-1].future()
        inbox = self._inbox
        stream.item.add_done_callback(lambda _: inbox.put(stream))

    def stop(self, trial_id: int, outcome: Outcome) -> None:
        """STOPPED or PAUSED: the worker ends the trial at its report (at once where it waits for the answer);
        CANCELLED: a trial queued at its worker ends without training, a running one at its next report, both
        without a result."""
        run = self._running.get(trial_id)
        self._awaiting.pop(trial_id, None)
        if run is not None:
            if outcome is Outcome.CANCELLED:
                self._cancelled.add(trial_id)
                run.stream.actor.cancel.remote(run.number, trial_id)
            else:
                run.stream.actor.decide.remote(trial_id, DECISION_OF[outcome])
        if outcome is Outcome.CANCELLED:
            for item in list(self._retry):
                if item[0].trial_id == trial_id:
                    self._retry.remove(item)
                    self._done.append(Event.finished(item[0], Result.cancelled(trial_id)))

    def poll(self, timeout: float | None = None) -> list[Event]:
        """The events that arrived, in order, waiting at most ``timeout`` seconds for the first. Costs
        O(events), whatever the number of trials in flight. A worker waiting at a rung for the answer to
        its report, which the loop did not stop or pause, goes on now."""
        for trial_id, actor in self._awaiting.items():
            actor.decide.remote(trial_id, Decision.CONTINUE)
        self._awaiting.clear()
        out, self._done = self._done, []
        self._check_starting()
        self._dispatch_retries()
        if not self._running and not self._starting:
            if self._retry:
                self._check_pool()
            return out
        if self._starting:  # wake up in time to retire a worker that does not start
            until = min(deadline for _, deadline in self._starting.values()) - time.monotonic()
            timeout = max(0.0, until if timeout is None else min(timeout, until))
        news = []
        with contextlib.suppress(queue.Empty):
            news.append(self._inbox.get(block=not out, timeout=timeout))
            while True:
                news.append(self._inbox.get_nowait())
        for what in news:
            if isinstance(what, _Running):
                if self._running.get(what.trial.trial_id) is what:  # (else news of an attempt already handled)
                    out += self._take_end(what)
            elif what is not None and what is self._streams[what.slot]:  # (else a wake-up, or a lost worker's)
                out += self._take_item(what)
        if any(e.result is not None for e in out):
            self._handed_out = time.perf_counter()
        self._check_starting()
        self._dispatch_retries()
        return out

    def _take_item(self, stream: _Stream) -> list[Event]:
        """The events the stream's next item makes (reports), then the trials that it lets end (their result was
        in, waiting for their messages on the stream); where it ends announcing a checkpoint, the watch moves past
        the checkpoint. A stream that fails ends nothing: its worker's trials learn it from their calls."""
        try:
            item = stream.item.result()
        except (ray.exceptions.RayError, RuntimeError) as e:
            if not isinstance(e, ray.exceptions.RayActorError):  # (a broken stream: the worker is replaced)
                with contextlib.suppress(Exception):
                    ray.kill(stream.actor, no_restart=True)
            return []
        stream.gen._consume_next_ref_n(stream.consume)
        self.stream_items += stream.consume
        events: list[Event] = []
        run = None
        for message in item:
            run = self._running.get(message.trial_id)
            if run is None or run.stream is not stream:
                continue
            run.streamed += 1
            if isinstance(message, Report):
                events.append(Event.reported(run.trial, message))
                if message.epoch in run.wait_epochs:
                    self._awaiting[message.trial_id] = stream.actor
        self._watch(stream, run if item and isinstance(item[-1], CheckpointNext) else None)
        return events + self._drain(stream)

    def _take_end(self, run: _Running) -> list[Event]:
        """The trial's call returned: it ends once the stream has brought what it sent there (see
        :meth:`_drain`); a failed call is the worker's death or a broken worker (see :meth:`_take_failure`)."""
        try:
            run.ended = run.future.result()
        except (ray.exceptions.RayError, RuntimeError) as e:
            return self._take_failure(run, e)
        assert run.ended is not None
        if run.stream is not self._streams[run.stream.slot]:  # its worker is gone since: its stream will not come
            run.stream.trials.remove(run.trial.trial_id)
            return self._take_finished(run, run.ended)
        return self._drain(run.stream)

    def _drain(self, stream: _Stream) -> list[Event]:
        """End the worker's trials, in their order, whose call returned and whose streamed messages are all in; the
        trial queued behind each starts."""
        events: list[Event] = []
        while stream.trials:
            run = self._running[stream.trials[0]]
            if run.ended is None or run.streamed < run.ended.streamed:
                break
            stream.trials.popleft()
            events += self._take_finished(run, run.ended)
            if stream.trials and not (nxt := self._running[stream.trials[0]]).started:
                nxt.started = True
                if nxt.trial.trial_id not in self._cancelled:
                    events.append(Event.started(nxt.trial, time=time.time(), worker=self._names[stream.slot]))
        return events

    def _take_finished(self, run: _Running, ended: Ended) -> list[Event]:
        trial, name, result = run.trial, self._names[run.stream.slot], ended.result
        del self._running[trial.trial_id]
        self._awaiting.pop(trial.trial_id, None)
        events = [Event.reported(trial, report) for report in ended.reports]
        if trial.trial_id in self._cancelled:
            self._cancelled.discard(trial.trial_id)
            result = Result.cancelled(trial.trial_id, worker=name)
        if result.ok:
            self.checkpoints.put(trial.trial_id, run.ckpt_ref)
        if result.start_time is not None and result.end_time is not None:
            self.prefetch.observe_duration(result.end_time - result.start_time)
        if run.stream is self._streams[run.stream.slot]:  # (a replaced worker's load went with it)
            self._set_load(run.stream.slot, self._load[run.stream.slot] - 1)
        return [*events, Event.finished(trial, result)]

    def _take_failure(self, run: _Running, e: BaseException) -> list[Event]:
        """The trial's call failed: its worker died (the trial is retried up to ``max_retries``, then FAILED with
        WORKER_LOST) or broke (FAILED); either way the worker is replaced."""
        trial, stream = run.trial, run.stream
        name = self._names[stream.slot]
        del self._running[trial.trial_id]
        self._awaiting.pop(trial.trial_id, None)
        stream.trials.remove(trial.trial_id)
        if stream is self._streams[stream.slot]:  # the first of its trials to report the death
            self._replace(stream.slot)
        if trial.trial_id in self._cancelled:
            self._cancelled.discard(trial.trial_id)
            return [Event.finished(trial, Result.cancelled(trial.trial_id, worker=name))]
        if not isinstance(e, ray.exceptions.RayActorError | ray.exceptions.ObjectLostError):
            return [Event.finished(trial, Result.failed(trial.trial_id, f"the worker broke: {e}", worker=name))]
        if run.attempt < self.max_retries:
            log.warning("worker %s died running trial %d (%s); retrying", name, trial.trial_id, type(e).__name__)
            self._retry.append((trial, run.attempt + 1, run.keep, run.wait_epochs))
            return [Event.requeued(trial, worker=name)]
        error = f"worker died {run.attempt + 1} times: {e}"
        return [Event.finished(trial, Result.failed(trial.trial_id, error, FailureKind.WORKER_LOST, worker=name))]

    def _dispatch_retries(self) -> None:
        while self._retry and (self._free[0] or (self.prefetch.on and self._free[1])):
            trial, attempt, keep, waits = self._retry.popleft()
            self.submit(trial, keep=keep, wait_epochs=waits, attempt=attempt)

    def _replace(self, slot: int) -> None:
        """Start a new worker in ``slot`` (Ray places it on a live node), or retire the slot at once
        when the cluster's resources can no longer hold the whole pool."""
        with contextlib.suppress(Exception):  # already dead is what we expect (a broken stream: not yet)
            ray.kill(self._actors[slot], no_restart=True)
        self._unlist(slot)  # the replacement is listed when it is up
        cluster = ray.cluster_resources()
        need_cpu, need_gpu = self.slots * self.cpus_per_trial, self.slots * self.gpus_per_trial
        if need_cpu > cluster.get("CPU", 0) + 1e-9 or need_gpu > cluster.get("GPU", 0) + 1e-9:
            self._retire(slot, f"the cluster has {cluster.get('CPU', 0):g} CPUs and {cluster.get('GPU', 0):g} "
                               f"GPUs, the pool needs {need_cpu:g} and {need_gpu:g}")
            return
        self._start_actor(slot)
        ref = self._actors[slot].info.remote()
        self._starting[slot] = (ref, time.monotonic() + self.start_timeout)
        inbox = self._inbox
        ref.future().add_done_callback(lambda _: inbox.put(None))  # wakes a waiting poll
        self.restarts += 1

    def _unlist(self, slot: int) -> None:
        self._streams[slot] = None  # (its trials, failed with the worker, are retried elsewhere)
        self._free[0].pop(slot, None)
        self._free[1].pop(slot, None)
        self._load[slot] = 2  # listed nowhere until _set_load

    def _check_starting(self) -> None:
        for slot, (ref, deadline) in list(self._starting.items()):
            done, _ = ray.wait([ref], timeout=0)
            if done:
                del self._starting[slot]
                try:
                    ray.get(ref)
                except ray.exceptions.RayError as e:
                    self._retire(slot, f"the replacement died while starting: {type(e).__name__}")
                    continue
                self._open_stream(slot)
            elif time.monotonic() >= deadline:
                del self._starting[slot]
                self._retire(slot, f"the replacement was not placed and started within {self.start_timeout:g} s")

    def _retire(self, slot: int, why: str) -> None:
        with contextlib.suppress(Exception):
            ray.kill(self._actors[slot], no_restart=True)
        self._actors[slot] = None
        self._unlist(slot)
        self.retired.append(slot)
        log.warning("worker %s could not be replaced (%s): the pool shrinks to %d workers",
                    self._names[slot], why, self.slots)

    def shutdown(self) -> None:
        for actor in self._actors:
            if actor is not None:
                with contextlib.suppress(Exception):
                    ray.kill(actor)
        self._actors = [None] * len(self._actors)
        self._streams = [None] * len(self._actors)
        self._running.clear()
        self._starting.clear()
        self._retry.clear()
        self._free = [{}, {}]

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
