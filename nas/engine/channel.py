"""The worker's side of one trial: its training runs on a thread of its own, its reports go out in order
through a queue as typed messages, and the loop's decisions come back in.

A worker (the in-process executor, a gang's lead rank) starts the trial with :meth:`TrialChannel.start` and
reads :meth:`TrialChannel.next` until the outcome: a :class:`Reported` message per epoch, then :class:`Done`
with the runner's (Result, checkpoint), or :class:`Crashed` where the training thread raised past the runner's
safety net. The runner calls :meth:`TrialChannel.report` after each epoch; it returns the decision known by
then (CONTINUE unless the loop said STOP or PAUSE). At the epochs in ``wait_epochs`` (a scheduler's rungs), or
at every epoch when ``lockstep`` (the in-process executor: a deterministic step per poll), the training
thread waits there until the worker relays the loop's answer (:meth:`decide`) or lets it go on (:meth:`go_on`),
so a decision at a rung lands before another epoch is trained; elsewhere it lands at the next report, within
one epoch. A worker that runs the training on a thread it already has (the Ray trainer actor: the trial's own
call) gives the channel ``send``, where the reports go instead, and keeps only the decisions coming back.

>>> from nas.core.types import Decision
>>> ch = TrialChannel(lockstep=True)
>>> def train(report):
...     return [report(e, {"val_acc": 0.1 * e}, 0.1 * e) for e in (1, 2, 3)]
>>> ch.start(lambda: train(ch.report))
>>> ch.next().epoch
1
>>> ch.go_on(); ch.next().epoch
2
>>> ch.decide(Decision.STOP); third, done = ch.next(), ch.next()   # the third report hears STOP
>>> third.epoch, [d.value for d in done.value]
(3, ['CONTINUE', 'STOP', 'STOP'])
"""

from __future__ import annotations

import contextlib
import dataclasses
import queue
import threading
import time
from collections.abc import Callable, Collection, Generator, Mapping
from typing import Any

from nas.core.types import Decision, Report


@dataclasses.dataclass(frozen=True, slots=True)
class Reported:
    """One epoch's report, as the training thread sent it."""

    epoch: int
    metrics: Mapping[str, Any]
    score: float | None
    time: float


@dataclasses.dataclass(frozen=True, slots=True)
class Done:
    """The training thread returned ``value`` (the runner's (Result, checkpoint))."""

    value: Any


@dataclasses.dataclass(frozen=True, slots=True)
class Crashed:
    """The training thread raised ``error`` (the runner turns a trial's failures into results; this is the rest)."""

    error: BaseException


Message = Reported | Done | Crashed


class TrialChannel:
    """One trial's reports out and decisions in (see the module docstring)."""

    def __init__(self, wait_epochs: Collection[int] = (), *, lockstep: bool = False,
                 send: Callable[[Reported], None] | None = None) -> None:
        self.wait_epochs = frozenset(wait_epochs)
        self.lockstep = lockstep
        self.send = send  # where reports go when the training runs on the worker's own thread (not start's)
        self.decision = Decision.CONTINUE
        self._out: queue.SimpleQueue[Message] = queue.SimpleQueue()
        self._answer = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, body: Callable[[], Any]) -> None:
        """Run ``body`` (the training) on a thread of its own; its return value becomes the :class:`Done`
        message."""

        def run() -> None:
            try:
                self._out.put(Done(body()))
            except BaseException as e:  # noqa: BLE001 - the worker reports it; the thread must not die silently
                self._out.put(Crashed(e))

        self._thread = threading.Thread(target=run, name="nas-trial", daemon=True)
        self._thread.start()

    def next(self, timeout: float | None = None) -> Message:
        """The next message from the training thread (waits for it)."""
        return self._out.get(timeout=timeout)

    def ready(self) -> list[Message]:
        """The messages already sent and not read yet (none: an empty list; never waits)."""
        out: list[Message] = []
        with contextlib.suppress(queue.Empty):
            while True:
                out.append(self._out.get_nowait())
        return out

    # -- called on the training thread -----------------------------------------------------------
    def report(self, epoch: int, metrics: Mapping[str, Any], score: float | None) -> Decision:
        self._answer.clear()
        (self.send or self._out.put)(Reported(epoch, dict(metrics), score, time.time()))
        if self.decision is Decision.CONTINUE and (self.lockstep or epoch in self.wait_epochs):
            self._answer.wait()
        return self.decision

    # -- called by the worker, relaying the loop ---------------------------------------------------
    def decide(self, decision: Decision) -> None:
        """The loop's answer to the last report (STOP or PAUSE); the training thread goes on to end."""
        if decision is not Decision.CONTINUE:
            self.decision = decision
        self._answer.set()

    def go_on(self) -> None:
        """No answer came: CONTINUE (the training thread, if it waits, trains on)."""
        self._answer.set()

    def reports(self, trial_id: int, worker: str) -> Generator[Report, None, Any]:
        """The training thread's reports as they come, as :class:`nas.core.types.Report` values from ``worker``;
        then the thread's value (``yield from`` returns it), or its error raised here."""
        while not isinstance(message := self.next(), Done | Crashed):
            yield Report(trial_id, message.epoch, message.metrics, message.score, message.time, worker)
        if isinstance(message, Crashed):
            raise message.error
        return message.value


__all__ = ["Crashed", "Done", "Message", "Reported", "TrialChannel"]
