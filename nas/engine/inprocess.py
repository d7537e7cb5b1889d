"""The in-process executor: trials run one after another in this process, in submission order
(deterministic; for tests, debugging and strategy studies). The Protocol it implements, its events and the
registry are in :mod:`nas.engine.protocol`.

A trial trains on a thread of its own in lockstep with the loop: each ``poll`` returns the next thing that
happened (``started`` with its first report, a ``report``, or ``finished``) and the training waits there
until the next ``poll`` or ``stop``, so the loop's answer to every report lands before another epoch is
trained, always at the same point.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import queue
import time
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from nas.core.registry import register_executor
from nas.core.types import Decision, FailureKind, Outcome, Report, Result, Trial
from nas.engine.channel import Crashed, Done, TrialChannel
from nas.engine.protocol import BoundedCheckpoints, Event, ExecutorConfig, KeepRule, TrainFn

if TYPE_CHECKING:
    from nas.core.space import SearchSpace
    from nas.train.data import Dataset
    from nas.train.settings import TrainSettings

__all__ = ["DECISION_OF", "InProcessExecutor"]

#: how a worker hears the loop's ``stop(trial_id, outcome)``
DECISION_OF = {Outcome.STOPPED: Decision.STOP, Outcome.PAUSED: Decision.PAUSE, Outcome.CANCELLED: Decision.STOP}


@register_executor("inprocess")
class InProcessExecutor:
    """Runs each trial in this process with one :class:`nas.train.runner.TrialRunner`, in submission order.
    ``slots`` trials may be submitted at once (as a pool of that many workers would take them), which lets
    asynchronous strategies be tested deterministically. A submitted trial is QUEUED until a ``poll`` begins
    it. ``train``: the training function (default: the built-in one); ``data`` None runs it without a model."""

    needs_ray = False

    def __init__(self, space: SearchSpace, data: Dataset | None, settings: TrainSettings | None = None, *,
                 train: TrainFn | None = None, slots: int = 1) -> None:
        from nas.train.runner import TrialRunner

        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise ValueError(f"slots must be an integer >= 1, got {slots!r}")
        self.space = space
        self._slots = slots
        self.runner = TrialRunner(data, settings, train=train)
        self.trial_timeout = settings.trial_timeout if settings is not None else None
        self._since = 0.0  # when the current trial started (time.monotonic)
        self.checkpoints = BoundedCheckpoints()
        self._queue: collections.deque[tuple[Trial, KeepRule, frozenset[int]]] = collections.deque()
        self._current: tuple[Trial, TrialChannel] | None = None
        self._waiting = False  # the current trial was let go on and its next message has not come yet
        self._cancelled: set[int] = set()

    @classmethod
    def from_config(cls, cfg: ExecutorConfig) -> InProcessExecutor:
        cfg.checked_options("inprocess")
        return cls(cfg.space, cfg.data, cfg.settings, train=cfg.train, slots=cfg.workers)

    @property
    def slots(self) -> int:
        return self._slots

    def free_slots(self) -> int:
        return self._slots - self.in_flight()

    def in_flight(self) -> int:
        return len(self._queue) + (self._current is not None)

    def now(self) -> float | None:
        return None

    def submit(self, trial: Trial, *, keep: KeepRule, wait_epochs: Collection[int] = ()) -> None:
        if self.free_slots() <= 0:
            raise RuntimeError("no free slot: submit only when free_slots() > 0")
        self._queue.append((trial, keep, frozenset(wait_epochs)))

    def stop(self, trial_id: int, outcome: Outcome) -> None:
        if outcome is Outcome.CANCELLED:
            self._cancelled.add(trial_id)
        if self._current is not None and self._current[0].trial_id == trial_id:
            self._current[1].decide(DECISION_OF[outcome])

    def poll(self, timeout: float | None = None) -> list[Event]:
        """The next step of the trial in progress, or the start of the next queued one; where that step takes
        longer than ``timeout`` seconds, what happened before it (the next poll waits on)."""
        events: list[Event] = []
        if self._current is None:
            if not self._queue:
                return []
            trial, keep, _ = self._queue.popleft()
            if trial.trial_id in self._cancelled:
                self._cancelled.discard(trial.trial_id)
                return [Event.finished(trial, Result.cancelled(trial.trial_id))]
            try:
                source = self.checkpoints.handle(trial.checkpoint_from)
                inherit = self.checkpoints.inheritable(trial.inherit_from)
            except KeyError as e:  # evicted, or lost with a driver crash: the trial cannot start from it
                failed = Result.failed(trial.trial_id, str(e.args[0]), FailureKind.CHECKPOINT_MISSING)
                return [Event.finished(trial, failed)]
            events.append(Event.started(trial, time=time.time(), worker=self.runner.worker))
            channel = TrialChannel(lockstep=True)
            own = dataclasses.replace(trial, arch=copy.deepcopy(trial.arch), hparams=copy.deepcopy(trial.hparams))
            # (the training function's own copy: one that wrote into ctx.trial.arch changed the strategy's record)
            channel.start(lambda: self.runner.run(own, self.space, source, report=channel.report,
                                                  inherit=inherit, keep=keep))
            self._current, self._waiting, self._since = (trial, channel), True, time.monotonic()
        elif not self._waiting:
            self._current[1].go_on()
            self._waiting = True
        trial, channel = self._current
        deadline = None if self.trial_timeout is None else self._since + self.trial_timeout
        if deadline is not None:
            left = max(0.0, deadline - time.monotonic())
            timeout = left if timeout is None else min(timeout, left)
        try:
            message = channel.next(timeout)
        except queue.Empty:  # (a trial that never reports leaves a time budget, or its timeout, to end it)
            if deadline is not None and time.monotonic() >= deadline:
                return [*events, self._time_out(trial, channel)]
            return events
        self._waiting = False
        if not isinstance(message, Done | Crashed):
            report = Report(trial.trial_id, message.epoch, message.metrics, message.score, message.time,
                            self.runner.worker)
            return [*events, Event.reported(trial, report)]
        self._current = None
        if isinstance(message, Crashed):
            # past the runner's net: a KeyboardInterrupt the training raised on its own thread (no Ctrl-C reaches
            # it). It ended the whole search, where on Ray the trial fails; it fails here too.
            from nas.train.runner import error_text

            return [*events, Event.finished(trial, Result.failed(
                trial.trial_id, error_text(message.error), FailureKind.ERROR, **self._times(),
                worker=self.runner.worker))]
        result, ckpt = message.value
        return [*events, self._finish(trial, result, ckpt)]

    def _time_out(self, trial: Trial, channel: TrialChannel) -> Event:
        """The trial ran past ``trial_timeout``: FAILED as TIMEOUT. Its thread cannot be stopped: it is told to stop at
        its next report and left behind (a daemon), and the next trial starts on a thread of its own."""
        channel.decide(Decision.STOP)
        self._current, self._waiting = None, False
        self._cancelled.discard(trial.trial_id)
        return Event.finished(trial, Result.failed(
            trial.trial_id, f"TIMEOUT: it ran past trial_timeout ({self.trial_timeout:g} s); in-process its thread "
            "cannot be stopped and was left behind", FailureKind.TIMEOUT, **self._times(), worker=self.runner.worker))

    def _times(self) -> dict[str, float]:
        """The current trial's start and end on the wall clock, for a result made here (its thread made none)."""
        end = time.time()
        return {"start_time": end - (time.monotonic() - self._since), "end_time": end}

    def _finish(self, trial: Trial, result: Result, ckpt: Any) -> Event:
        if trial.trial_id in self._cancelled:
            self._cancelled.discard(trial.trial_id)
            return Event.finished(trial, Result.cancelled(trial.trial_id, worker=result.worker))
        if result.ok:
            self.checkpoints.put(trial.trial_id, ckpt)
        return Event.finished(trial, result)

    def shutdown(self) -> None:
        if self._current is not None:  # let a trial in training end at its next report
            self._current[1].decide(Decision.STOP)
            self._current, self._waiting = None, False
        self._queue.clear()

    def __enter__(self) -> InProcessExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
