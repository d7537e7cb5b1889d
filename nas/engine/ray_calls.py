"""The Ray executor's trials in flight (:class:`nas.engine.ray_pool.RayExecutor`): each trial is one plain call on its
worker (:meth:`TrainerActor.take`, numbered per worker so that the worker runs them in the order they were sent) that
returns when the trial ends, with its result and the reports that came with it; what a trial says while it trains
comes on its worker's ONE stream, started once for the worker's life (:meth:`TrainerActor.stream`). This module turns
both into the loop's events, in order: a trial ends only once the stream has brought every message its result counts,
and the trial queued behind it then starts.

The driver never scans what is in flight: a callback on each trial's call and on the next item of each worker's stream
puts it into the inbox, and :meth:`TrialCalls.take_news` handles only what the inbox holds (O(events))."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import queue
import time
from collections import deque
from typing import Any

import ray
import ray.exceptions

from nas.core.types import FailureKind, Report, Result, Trial
from nas.engine.protocol import BoundedCheckpoints, Event, KeepRule, PrefetchRule
from nas.engine.ray_workers import TrainerPool
from nas.engine.retries import Retries
from nas.engine.trainer_actor import CheckpointNext, Ended, ended_of, hand_over

log = logging.getLogger(__name__)

NO_SOURCES = (None, None)  # a trial that starts from no checkpoint and inherits from none


@dataclasses.dataclass(slots=True)
class WorkerStream:
    """One worker's stream and the trials it holds, the running one first."""

    slot: int
    actor: Any
    gen: Any  # the actor's ObjectRefGenerator
    trials: deque[int] = dataclasses.field(default_factory=deque)
    sent: int = 0  # trials handed to the actor (the next one's number)
    item: Any = None  # future of the stream's next item, filled on Ray's thread
    consume: int = 1  # stream items read once the watched one is in
    timed_out: int | None = None  # the trial whose timeout stopped this worker (its others run again elsewhere)


@dataclasses.dataclass(slots=True)
class TrialCall:
    trial: Trial
    stream: WorkerStream  # its worker's stream (a slot's worker may have been replaced since)
    attempt: int
    keep: KeepRule
    wait_epochs: frozenset[int]  # where its worker waits for the loop's answer (rungs)
    started: bool
    number: int = 0  # its number on its worker (the worker runs them in this order)
    serial: int = 0  # this call's (a retried trial's next attempt is another call)
    ref: Any = None  # its take call's return: an Ended, pickled
    streamed: int = 0  # its messages read from the stream
    ended: Ended | None = None  # its take call's return, once in
    ckpt_ref: Any = None  # its checkpoint's reference, once announced (never fetched here)
    since: float = 0.0  # when it started on its worker (time.monotonic), for the run's trial_timeout


class TrialCalls:
    """The trials out on ``pool``'s workers (see the module docstring). A finished trial's kept checkpoint goes to
    ``checkpoints``, its duration to ``prefetch``; a trial whose worker died goes to ``retries`` while it has
    attempts left (``max_retries``)."""

    def __init__(self, pool: TrainerPool, inbox: queue.SimpleQueue[Any], checkpoints: BoundedCheckpoints,
                 prefetch: PrefetchRule, retries: Retries, max_retries: int,
                 trial_timeout: float | None = None) -> None:
        self.pool, self.inbox, self.checkpoints, self.prefetch = pool, inbox, checkpoints, prefetch
        self.retries, self.max_retries, self.trial_timeout = retries, max_retries, trial_timeout
        self.streams: list[WorkerStream | None] = [None] * len(pool.actors)  # each worker's stream, once it is up
        self.running: dict[int, TrialCall] = {}  # trial id -> its call
        self.cancelled: set[int] = set()
        self.awaiting: dict[int, Any] = {}  # trial id -> actor: a report at such an epoch, not answered yet
        self.stream_items = 0  # items read from the actors' streams (a trivial trial makes none)
        self._serials = itertools.count()

    def open(self, slot: int) -> None:
        """Start the worker's one stream (its worker is up) and list the worker as free."""
        actor = self.pool.actors[slot]
        gen = actor.stream.options(num_returns="streaming", name="stream").remote()
        stream = self.streams[slot] = WorkerStream(slot, actor, gen)
        self._watch(stream)
        self.pool.list_free(slot)

    def send(self, slot: int, trial: Trial, sources: tuple[Any, Any], keep: KeepRule, wait_epochs: frozenset[int],
             attempt: int) -> bool:
        """Hand ``trial`` to the worker in ``slot``; True where it was idle (the trial starts at once)."""
        idle = self.pool.load[slot] == 0
        self.pool.add(slot, 1)
        stream = self.streams[slot]
        assert stream is not None
        run = self.running[trial.trial_id] = TrialCall(trial, stream, attempt, keep, wait_epochs, idle,
                                                       since=time.monotonic())
        run.number, stream.sent, run.serial = stream.sent, stream.sent + 1, next(self._serials)
        handed = hand_over(run.number, trial, keep, wait_epochs)
        # (the checkpoints travel inside a tuple: the actor fetches them, so a lost one fails this trial alone)
        run.ref = stream.actor.take.remote(handed) if sources == NO_SOURCES else stream.actor.take.remote(handed,
                                                                                                          sources)
        # Its return (or error) comes to a callback on Ray's thread: no Future object per call, and the callback
        # holds no reference to the call (a cycle would keep each finished call's objects until a GC pass).
        trial_id, serial, inbox = trial.trial_id, run.serial, self.inbox
        run.ref._on_completed(lambda value: inbox.put((trial_id, serial, value)))
        stream.trials.append(trial.trial_id)
        return idle

    def _watch(self, stream: WorkerStream, ckpt_of: TrialCall | None = None) -> None:
        """A callback (on Ray's thread, which also fetches the small value) when the next item of the
        worker's stream is in (after the checkpoint of ``ckpt_of``, not fetched: its reference goes to that trial):
        poll reads only what these callbacks (and those on the trials' calls) queue."""
        skip = int(ckpt_of is not None)
        refs = stream.gen._get_next_ref_n(skip + 1)
        if ckpt_of is not None:
            ckpt_of.ckpt_ref = refs[0]
        stream.consume = skip + 1  # the stream is read up to the watched item once it is in
        stream.item = refs[-1].future()
        inbox = self.inbox
        stream.item.add_done_callback(lambda _: inbox.put(stream))

    def take_news(self, news: list[Any]) -> list[Event]:
        """The events of what the inbox held (calls' returns, streams with news; None: a wake-up)."""
        out: list[Event] = []
        for what in news:
            if isinstance(what, tuple):
                run = self.running.get(what[0])
                if run is not None and run.serial == what[1]:  # (else news of an attempt already handled)
                    out += self._take_end(run, what[2])
            elif what is not None and what is self.streams[what.slot]:  # (else a wake-up, or a lost worker's)
                out += self._take_item(what)
        return out

    def _take_item(self, stream: WorkerStream) -> list[Event]:
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
            run = self.running.get(message.trial_id)
            if run is None or run.stream is not stream:
                continue
            run.streamed += 1
            if isinstance(message, Report):
                events.append(Event.reported(run.trial, message))
                if message.epoch in run.wait_epochs:
                    self.awaiting[message.trial_id] = stream.actor
        self._watch(stream, run if item and isinstance(item[-1], CheckpointNext) else None)
        return events + self._drain(stream)

    def _take_end(self, run: TrialCall, returned: Any) -> list[Event]:
        """The trial's call returned: it ends once the stream has brought what it sent there (see
        :meth:`_drain`); a failed call is the worker's death or a broken worker (see :meth:`_take_failure`)."""
        if isinstance(returned, BaseException):
            return self._take_failure(run, returned)
        try:
            run.ended = ended_of(returned)
        except Exception as e:  # (not what a trainer actor returns: the worker is broken)
            return self._take_failure(run, e)
        if run.stream is not self.streams[run.stream.slot]:  # its worker is gone since: its stream will not come
            run.stream.trials.remove(run.trial.trial_id)
            return self._take_finished(run, run.ended)
        return self._drain(run.stream)

    def _drain(self, stream: WorkerStream) -> list[Event]:
        """End the worker's trials, in their order, whose call returned and whose streamed messages are all in; the
        trial queued behind each starts."""
        events: list[Event] = []
        while stream.trials:
            run = self.running[stream.trials[0]]
            if run.ended is None or run.streamed < run.ended.streamed:
                break
            stream.trials.popleft()
            events += self._take_finished(run, run.ended)
            if stream.trials and not (nxt := self.running[stream.trials[0]]).started:
                nxt.started, nxt.since = True, time.monotonic()
                if nxt.trial.trial_id not in self.cancelled:
                    events.append(Event.started(nxt.trial, time=time.time(), worker=self.pool.names[stream.slot]))
        return events

    def _take_finished(self, run: TrialCall, ended: Ended) -> list[Event]:
        trial, name, result = run.trial, self.pool.names[run.stream.slot], ended.result
        del self.running[trial.trial_id]
        self.awaiting.pop(trial.trial_id, None)
        events = [Event.reported(trial, report) for report in ended.reports]
        if trial.trial_id in self.cancelled:
            self.cancelled.discard(trial.trial_id)
            result = Result.cancelled(trial.trial_id, worker=name)
        if result.ok:
            self.checkpoints.put(trial.trial_id, run.ckpt_ref)
        if result.start_time is not None and result.end_time is not None:
            self.prefetch.observe_duration(result.end_time - result.start_time)
        if run.stream is self.streams[run.stream.slot]:  # (a replaced worker's load went with it)
            self.pool.add(run.stream.slot, -1)
        return [*events, Event.finished(trial, result)]

    def _take_failure(self, run: TrialCall, e: BaseException) -> list[Event]:
        """The trial's call failed: its worker died (the trial is retried up to ``max_retries``, then FAILED with
        WORKER_LOST) or broke (FAILED); either way the worker is replaced."""
        trial, stream = run.trial, run.stream
        name = self.pool.names[stream.slot]
        del self.running[trial.trial_id]
        self.awaiting.pop(trial.trial_id, None)
        stream.trials.remove(trial.trial_id)
        if stream is self.streams[stream.slot]:  # the first of its trials to report the death
            self.streams[stream.slot] = None  # (its trials, failed with the worker, are retried elsewhere)
            self.pool.replace(stream.slot)
        if trial.trial_id in self.cancelled:
            self.cancelled.discard(trial.trial_id)
            return [Event.finished(trial, Result.cancelled(trial.trial_id, worker=name))]
        if stream.timed_out == trial.trial_id:  # (its times: the worker's time went to it, for the utilization)
            end = time.time()
            return [Event.finished(trial, Result.failed(
                trial.trial_id, f"TIMEOUT: it ran past trial_timeout ({self.trial_timeout:g} s); its worker was "
                "stopped and replaced", FailureKind.TIMEOUT, worker=name,
                start_time=end - (time.monotonic() - run.since), end_time=end))]
        if stream.timed_out is not None:  # (queued behind the one that timed out: not its fault, no attempt spent)
            self.retries.add(trial, run.attempt, run.keep, run.wait_epochs)
            return [Event.requeued(trial, worker=name)]
        if not isinstance(e, ray.exceptions.RayActorError | ray.exceptions.ObjectLostError):
            return [Event.finished(trial, Result.failed(trial.trial_id, f"the worker broke: {e}", worker=name))]
        if run.attempt < self.max_retries:
            log.warning("worker %s died running trial %d (%s); retrying", name, trial.trial_id, type(e).__name__)
            self.retries.add(trial, run.attempt + 1, run.keep, run.wait_epochs)
            return [Event.requeued(trial, worker=name)]
        error = f"worker died {run.attempt + 1} times: {e}"
        return [Event.finished(trial, Result.failed(trial.trial_id, error, FailureKind.WORKER_LOST, worker=name))]

    def time_out(self, now: float) -> float | None:
        """Stop each worker whose running trial started more than ``trial_timeout`` seconds before ``now`` (its call
        then fails, and :meth:`_take_failure` records TIMEOUT); the next such deadline, or None. O(workers)."""
        if self.trial_timeout is None:
            return None
        soonest = None
        for stream in self.streams:
            if stream is None or not stream.trials or stream.timed_out is not None:
                continue
            run = self.running[stream.trials[0]]
            deadline = run.since + self.trial_timeout
            if not run.started or deadline > now:
                soonest = deadline if run.started and (soonest is None or deadline < soonest) else soonest
                continue
            log.warning("trial %d ran past trial_timeout (%g s): stopping its worker %s", run.trial.trial_id,
                        self.trial_timeout, self.pool.names[stream.slot])
            stream.timed_out = run.trial.trial_id
            ray.kill(stream.actor, no_restart=True)
        return soonest

    def clear(self) -> None:
        self.streams = [None] * len(self.streams)
        self.running.clear()


__all__ = ["TrialCall", "TrialCalls", "WorkerStream"]
