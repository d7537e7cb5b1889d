"""The Ray trainer actor: one worker of :class:`nas.engine.ray_pool.RayExecutor`'s pool, named ``nas-trainer-<i>``
in the dashboard. A trial is handed to it by a plain actor call (:meth:`TrainerActor.take`, numbered per actor:
the actor runs its trials in their numbered order whatever order Ray delivers the calls in) and trains on that
call's own thread; the call returns when the trial has ended, with its result and the reports not sent yet: a
trivial trial costs the driver what any remote call does. What a trial says while it trains (each epoch's report,
its checkpoint) goes out on ONE streaming generator started once for the actor's life (:meth:`TrainerActor.stream`):
reports that are ready together make one item (a tuple), and a kept checkpoint is announced (:class:`CheckpointNext`)
and then sent as an item of its own, left in the object store and owned by the driver, which never fetches it unless
it is used. A report waits up to ``LINGER`` (20 ms: longer than a loaded machine keeps a light actor's process waiting
for a core) for its trial's end and then travels with the result (a report at a scheduler's rung goes at once); the
result says how many messages of its trial went by the stream, so the driver puts them in order. One thread per actor
(:class:`_Linger`) sends what waited longer and writes the actor's log lines of a burst together, at most once per
``WRITE_EVERY`` (docs/ray-path.md)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import logging
import math
import os
import pickle
import queue
import sys
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import ray
import ray.exceptions

from nas.core.types import Decision, FailureKind, Report, Result, Trial, arch_key
from nas.engine.channel import Reported, TrialChannel
from nas.engine.protocol import KeepRule, TrainFn

if TYPE_CHECKING:
    from nas.core.space import SearchSpace
    from nas.train.data import Dataset
    from nas.train.settings import TrainSettings


log = logging.getLogger(__name__)


#: seconds a report waits for the trial's end (then both travel with the result) before it goes out on the stream
LINGER = 0.02

#: seconds between two writes of an actor's log lines (a burst's lines are written together)
WRITE_EVERY = 1.0


@dataclasses.dataclass(frozen=True, slots=True)
class CheckpointNext:
    """The stream's next item is the checkpoint of trial ``trial_id`` (bytes, kept in the object store, not
    fetched)."""

    trial_id: int = -1


@dataclasses.dataclass(frozen=True, slots=True)
class Ended:
    """What a trial's :meth:`TrainerActor.take` returns: its reports not sent on the stream, its final result, and
    how many messages of it (reports, a checkpoint) went out on the stream before."""

    reports: tuple[Report, ...]
    result: Result
    streamed: int


StreamItem = tuple[Report | CheckpointNext, ...]
"""One item of an actor's stream: the reports ready together, in order; where it ends with :class:`CheckpointNext`
the next item is that checkpoint's bytes."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Checkpoint:
    trial_id: int
    data: bytes


class _Linger:
    """What the running trial says, on its way out. Its reports wait here up to ``LINGER`` for its end (then they go
    with the result); one thread for the actor's life sends those that waited longer on the stream, woken at the
    first held report's ``LINGER``: a trivial trial costs no hand-over to another thread and back. The actor's log
    lines go out at most once per ``WRITE_EVERY``: a line after a quiet spell at once, the lines of a burst together
    by the thread, since each write costs Ray's log monitor and GCS more than a trivial trial's call (each actor's log
    is a file they read and publish on every change: with 64 actors about 0.5 ms of CPU per line, docs/ray-path.md)."""

    def __init__(self, outbox: queue.SimpleQueue[list[Report] | _Checkpoint]) -> None:
        self._outbox = outbox
        self._lock = threading.Condition()
        self._held: list[Report] = []  # the running trial's reports not sent yet
        self._held_since = 0.0  # when the first of them came (time.monotonic)
        self._streamed = 0  # the running trial's messages sent on the stream
        self._lines: list[str] = []  # log lines of a burst, not written yet
        self._written = -math.inf  # when the last log line went out
        self._due: float | None = None  # when the thread next looks
        threading.Thread(target=self._serve, name="nas-linger", daemon=True).start()

    def begin(self, line: str) -> None:
        """A trial begins; ``line`` goes to the actor's log (the dashboard shows it)."""
        with self._lock:
            self._held, self._streamed = [], 0
            now = time.monotonic()
            self._lines.append(line)
            if len(self._lines) == 1 and now - self._written >= WRITE_EVERY:
                self._write(now)
            self._arm(now + LINGER)  # (the thread's one look at the trial: its reports' timer is set with it)

    def hold(self, report: Report, *, at_once: bool) -> None:
        """The running trial reported: it goes with the result unless its trial trains on past ``LINGER``, or at
        once (``at_once``: the trial waits for the driver's answer)."""
        with self._lock:
            if not self._held:
                self._held_since = time.monotonic()
            self._held.append(report)
            if at_once:
                self._send()
            else:
                self._arm(self._held_since + LINGER)

    def end(self, checkpoint: _Checkpoint | None) -> tuple[tuple[Report, ...], int]:
        """The running trial ended: its reports not sent yet, and how many of its messages went by the stream
        (``checkpoint``, where kept, is sent after the others and counted)."""
        with self._lock:
            held, self._held = tuple(self._held), []
            if checkpoint is not None:
                self._outbox.put(checkpoint)
                self._streamed += 1
            return held, self._streamed

    def flush(self) -> None:
        """Write the log lines not written yet (the worker is about to go)."""
        with self._lock:
            if self._lines:
                self._write(time.monotonic())

    def _arm(self, due: float) -> None:
        if self._due is None or due < self._due:
            self._due = due
            self._lock.notify()

    def _send(self) -> None:
        if self._held:
            self._outbox.put(self._held)
            self._streamed += len(self._held)
            self._held = []

    def _write(self, now: float) -> None:
        sys.stdout.write("".join(self._lines))
        sys.stdout.flush()
        self._lines, self._written = [], now

    def _serve(self) -> None:
        with self._lock:
            while True:
                if self._due is None or (left := self._due - time.monotonic()) > 0:
                    self._lock.wait(None if self._due is None else left)
                    continue
                now, self._due = time.monotonic(), None
                if self._held and now - self._held_since >= LINGER:
                    self._send()
                elif self._held:  # (a later trial's: they wait their own LINGER)
                    self._arm(self._held_since + LINGER)
                if self._lines and now - self._written >= WRITE_EVERY:
                    self._write(now)
                elif self._lines:
                    self._arm(self._written + WRITE_EVERY)


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


@ray.remote(concurrency_groups={"monitor": 1, "trials": 4})  # type: ignore[call-overload]
class TrainerActor:
    """One worker: trials run one at a time, in their numbered order, each on its own call's thread; ``take``
    (the trials group: the running trial's call and the queued ones' wait there) hands one over and returns when
    it ends; ``stream`` (the default group, started once) sends what trials say while they train; ``decide``,
    ``cancel`` and ``info`` answer while one runs (the monitor group), ``info`` with the trial and architecture it is
    training. Its torch thread count is its CPU share, so actors never oversubscribe cores; a worker without data
    never loads torch."""

    def __init__(self, name: str, space: SearchSpace | None, data: Dataset | None, settings: TrainSettings | None,
                 train: TrainFn | None, threads: int) -> None:
        from nas.train.runner import TrialRunner

        self.name = name
        self.node = ray.get_runtime_context().get_node_id()[:12]  # (an actor's node is its for life: asked once)
        self.space = space
        self.threads = threads
        self.current: dict[str, Any] | None = None
        self.channels: dict[int, TrialChannel] = {}  # the trial in training (at most one) and its channel
        if data is not None or settings is not None:  # (a bare benchmark worker, neither, never loads torch)
            self._set_threads((settings.threads if settings is not None else None) or threads)
        self.runner = TrialRunner(data, settings, train=train, worker=name)
        self._next = 0  # the number of the next trial to begin
        self._began = -1  # the number of the last trial begun
        self._cancelled: set[int] = set()  # numbers of trials cancelled before they began
        self._turn = threading.Condition()
        self._outbox: queue.SimpleQueue[list[Report] | _Checkpoint] = queue.SimpleQueue()  # what the stream sends
        self._linger = _Linger(self._outbox)

    @staticmethod
    def _set_threads(n: int) -> None:
        import torch

        torch.set_num_threads(n)

    @ray.method(concurrency_group="trials")
    def take(self, handed: bytes, sources: tuple[Any, Any] = (None, None)) -> bytes:
        """Run the trial ``handed`` over (:func:`hand_over`: its number on this actor, from 0, the trial, its
        KeepRule and the epochs where it waits for the driver's answer) in its turn; ``sources``: its checkpoint and
        the one it inherits from, as bytes or ObjectRefs (fetched here: a lost one fails this trial alone). Returns
        its :class:`Ended`, pickled (:func:`ended_of` reads it)."""
        number, trial, keep, wait_epochs = pickle.loads(handed)
        return pickle.dumps(self._take(number, trial, sources, keep, wait_epochs), pickle.HIGHEST_PROTOCOL)

    def _take(self, number: int, trial: Trial, sources: tuple[Any, Any], keep: KeepRule,
              wait_epochs: frozenset[int]) -> Ended:
        with self._turn:
            while self._next != number:
                self._turn.wait()
            cancelled, self._began = number in self._cancelled, number
            self._cancelled.discard(number)
        try:
            if cancelled:
                return Ended((), Result.cancelled(trial.trial_id, worker=self.name), 0)
            return self._run(trial, sources, keep, wait_epochs)
        finally:
            with self._turn:
                self._next += 1
                self._turn.notify_all()

    def _run(self, trial: Trial, sources: tuple[Any, Any], keep: KeepRule, wait_epochs: frozenset[int]) -> Ended:
        start = time.time()
        arch = self.space.format(trial.arch) if self.space is not None else arch_key(trial.arch)
        self.current = {"trial_id": trial.trial_id, "arch": arch, "since": start}
        self._linger.begin(f"{datetime.datetime.fromtimestamp(start).isoformat(timespec='seconds')} {self.name}: "
                           f"trial {trial.trial_id} started: {arch}\n")  # the actor's log in the dashboard
        try:
            checkpoint = fetch_source(sources[0])
        except ray.exceptions.RayError as e:
            self.current = None
            return Ended((), Result.failed(trial.trial_id, f"its checkpoint was lost: {type(e).__name__}",
                                           FailureKind.CHECKPOINT_MISSING, worker=self.name), 0)
        try:
            inherit = fetch_source(sources[1])
        except ray.exceptions.RayError:  # (a head start, not a need: the child trains from scratch)
            inherit = None

        def send(message: Reported) -> None:
            self._linger.hold(Report(trial.trial_id, message.epoch, message.metrics, message.score, message.time,
                                     self.name), at_once=message.epoch in wait_epochs)

        channel = self.channels[trial.trial_id] = TrialChannel(wait_epochs, send=send)
        try:
            result, ckpt = self.runner.run(trial, self.space, checkpoint, report=channel.report, inherit=inherit,
                                           keep=keep)
        except BaseException as e:  # noqa: BLE001 - past the runner's safety net: this trial fails, the worker goes on
            held, streamed = self._linger.end(None)
            return Ended(held, Result.failed(trial.trial_id, f"{type(e).__name__}: {e}", worker=self.name), streamed)
        finally:
            self.current = None
            self.channels.pop(trial.trial_id, None)
        result.node = self.node
        held, streamed = self._linger.end(_Checkpoint(trial.trial_id, ckpt) if ckpt is not None else None)
        return Ended(held, result, streamed)

    def stream(self) -> Iterator[StreamItem | bytes]:
        """The actor's one stream, for its whole life: the reports its trials send while they train, those ready
        together as one item; a kept checkpoint as :class:`CheckpointNext` closing an item, then its bytes as an item
        of their own (owned by the driver, which leaves them in the object store)."""
        while True:
            entries = [self._outbox.get()]
            with contextlib.suppress(queue.Empty):
                while True:
                    entries.append(self._outbox.get_nowait())
            batch: list[Report | CheckpointNext] = []
            for entry in entries:
                if isinstance(entry, _Checkpoint):
                    yield (*batch, CheckpointNext(entry.trial_id))
                    yield entry.data
                    batch = []
                else:
                    batch += entry
            if batch:
                yield tuple(batch)

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
        with self._turn:
            if number > self._began:
                self._cancelled.add(number)
                return
        self._decide(trial_id, Decision.STOP)

    @ray.method(concurrency_group="monitor")
    def flush(self) -> None:
        """Write the log lines not written yet: the pool asks before it stops its workers."""
        self._linger.flush()

    @ray.method(concurrency_group="monitor")
    def info(self) -> dict[str, Any]:
        torch = sys.modules.get("torch")
        return {"name": self.name, "pid": os.getpid(), "threads": torch.get_num_threads() if torch else None,
                "cuda": bool(torch and torch.cuda.is_available()), "gpu_ids": ray.get_gpu_ids(),
                "node": ray.get_runtime_context().get_node_id(), "current": self.current}

    def __repr__(self) -> str:  # the dashboard's actor list shows it
        return self.name


def hand_over(number: int, trial: Trial, keep: KeepRule, wait_epochs: frozenset[int]) -> bytes:
    """What :meth:`TrainerActor.take` is handed: one argument of bytes, which Ray sends as they are, where five
    arguments (a Trial, a KeepRule, a frozenset, ...) each cost Ray's serializer a pass of its own (msgpack, then a
    cloudpickle Pickler: about 0.1 ms apiece in the driver). Pickle, as Ray's own transport uses, keeps the trial's
    arch as the space gave it (tuples stay tuples); it travels only between the driver and its own actors.

    >>> number, trial, keep, waits = pickle.loads(hand_over(3, Trial(7, {"x": (1, 2)}), KeepRule(), frozenset({2})))
    >>> number, trial.trial_id, trial.arch, keep.save, waits
    (3, 7, {'x': (1, 2)}, False, frozenset({2}))
    """
    return pickle.dumps((number, trial, keep, wait_epochs), pickle.HIGHEST_PROTOCOL)


def ended_of(returned: bytes) -> Ended:
    """The :class:`Ended` that :meth:`TrainerActor.take` returned (as bytes: Ray hands bytes over without a
    serializer pass of its own, both ways)."""
    ended = pickle.loads(returned)
    if not isinstance(ended, Ended):
        raise TypeError(f"a trainer actor returned {type(ended).__name__}, not Ended")
    return ended


def fetch_source(item: Any) -> bytes | None:
    """A trial's checkpoint as handed to the actor: bytes as they are, an ObjectRef fetched (a lost one raises)."""
    return ray.get(item) if isinstance(item, ray.ObjectRef) else item  # type: ignore[no-any-return]


__all__ = ["LINGER", "WRITE_EVERY", "CheckpointNext", "Ended", "StreamItem", "TrainerActor", "ended_of",
           "fetch_checkpoint", "fetch_source", "hand_over"]
