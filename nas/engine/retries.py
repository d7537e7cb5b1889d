"""Trials waiting to run again after their worker died, for the Ray executors (:mod:`nas.engine.ray_pool` and
:mod:`nas.engine.gang_executor`): in the order they were lost, each with the attempt it is on; a free slot takes the
oldest first, and a cancelled one leaves the queue as its CANCELLED end.

>>> from nas.core.types import Trial
>>> retries = Retries()
>>> retries.add(Trial(3, {"x": 1}), 1, KeepRule(), frozenset())
>>> [(e.kind.value, e.result.outcome.value) for e in retries.cancel(3)], len(retries)
([('finished', 'CANCELLED')], 0)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import NamedTuple

from nas.core.types import Result, Trial
from nas.engine.protocol import Event, KeepRule


class Retry(NamedTuple):
    trial: Trial
    attempt: int  # the attempt it runs as (0: its first)
    keep: KeepRule
    wait_epochs: frozenset[int]


class Retries:
    """The queue of trials to run again (see the module docstring)."""

    def __init__(self) -> None:
        self._queue: deque[Retry] = deque()

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, trial: Trial, attempt: int, keep: KeepRule, wait_epochs: frozenset[int]) -> None:
        self._queue.append(Retry(trial, attempt, keep, wait_epochs))

    def cancel(self, trial_id: int) -> list[Event]:
        """Take ``trial_id`` out of the queue: its CANCELLED end (none where it is not queued)."""
        out = []
        for item in [r for r in self._queue if r.trial.trial_id == trial_id]:
            self._queue.remove(item)
            out.append(Event.finished(item.trial, Result.cancelled(trial_id)))
        return out

    def dispatch(self, room: Callable[[], bool], submit: Callable[[Retry], None]) -> None:
        """Hand the oldest to ``submit`` while ``room()`` says a slot takes one."""
        while self._queue and room():
            submit(self._queue.popleft())

    def clear(self) -> None:
        self._queue.clear()


__all__ = ["Retries", "Retry"]
