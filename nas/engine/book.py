"""The loop's book of trials: one record per trial id with its state (one place, an Enum), a tally kept in step
(O(1) counts at 100,000 trials), and the best result so far. The loop and its replay on resume change it only
through :meth:`TrialBook.add`, :meth:`TrialBook.move` and :meth:`TrialBook.finish`. :class:`FailureWatch` counts
the failures that mean a misconfigured search (a space that never builds, an objective never reported).

>>> from nas.core.types import Outcome
>>> book = TrialBook()
>>> r = book.add(Trial(0, {"x": 1}), TrialState.QUEUED)
>>> book.move(r, TrialState.RUNNING); book.count(TrialState.RUNNING), book.count(TrialState.QUEUED)
(1, 0)
>>> book.finish(r, Result(0, Outcome.COMPLETE, score=0.5)), book.finished, book.best_score
(True, 1, 0.5)
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable
from typing import Any

from nas.core.types import Decision, FailureKind, Outcome, Result, Trial, TrialState

FINISHED = (TrialState.COMPLETE, TrialState.FAILED)


@dataclasses.dataclass(slots=True)
class TrialRecord:
    trial: Trial
    state: TrialState
    result: Result | None = None
    submitted_at: float = 0.0
    started_at: float | None = None  # when its worker began it (QUEUED -> RUNNING), the executor's clock
    runs: int = 1  # 1 + the promotions that continued it from its checkpoint
    epoch: int = 0  # the last epoch it reported
    decided: Decision | None = None  # the STOP or PAUSE the loop answered one of its reports with
    decided_at: int | None = None  # the epoch of that report
    curve: list[dict[str, Any]] | None = None  # this run's reports as history entries, until it ends (see loop)


class TrialBook:
    """Every trial of a run by id (see the module docstring)."""

    def __init__(self) -> None:
        self.records: dict[int, TrialRecord] = {}
        self._tally: collections.Counter[TrialState] = collections.Counter()
        self.best: tuple[Trial, Result] | None = None

    def __contains__(self, trial_id: object) -> bool:
        return trial_id in self.records

    def get(self, trial_id: int) -> TrialRecord | None:
        return self.records.get(trial_id)

    def add(self, trial: Trial, state: TrialState, **fields: object) -> TrialRecord:
        record = TrialRecord(trial, state, **fields)  # type: ignore[arg-type]
        self.records[trial.trial_id] = record
        self._tally[state] += 1
        return record

    def move(self, record: TrialRecord, state: TrialState) -> None:
        self._tally[record.state] -= 1
        self._tally[state] += 1
        record.state = state

    def finish(self, record: TrialRecord, result: Result) -> bool:
        """Record ``result`` as ``record``'s latest (a continued trial's newer one replaces the last); True when
        it is the best so far."""
        self.move(record, result.state)
        record.result = result
        record.epoch = max(record.epoch, result.epoch)
        if result.ok and (self.best is None or result.score > self.best[1].score):  # type: ignore[operator]
            self.best = (record.trial, result)
            return True
        return False

    def count(self, *states: TrialState) -> int:
        return sum(self._tally[s] for s in states)

    @property
    def finished(self) -> int:
        return self.count(*FINISHED)

    @property
    def in_flight(self) -> int:
        return self.count(TrialState.QUEUED, TrialState.RUNNING)

    @property
    def best_score(self) -> float | None:
        return self.best[1].score if self.best else None

    def in_states(self, *states: TrialState) -> list[TrialRecord]:
        return [r for r in self.records.values() if r.state in states]

    def results(self) -> list[tuple[Trial, Result]]:
        return [(r.trial, r.result) for r in self.records.values() if r.result is not None]


class FailureWatch:
    """Stops a misconfigured search early: once each of the first ``limit`` finished trials failed with ``kind``
    and none got past it (``clears`` says which result does), :meth:`see` answers with the first one's error."""

    def __init__(self, kind: FailureKind, limit: int | None, clears: Callable[[Result], bool]) -> None:
        self.kind, self.limit, self.clears = kind, limit, clears
        self.count, self.cleared, self.first = 0, limit is None, ""

    def see(self, result: Result) -> str | None:
        if self.cleared:
            return None
        if result.failure is not self.kind:
            self.cleared = self.clears(result)
            return None
        self.count += 1
        self.first = self.first or (result.error or "").splitlines()[0]
        return self.first if self.limit is not None and self.count >= self.limit else None


#: how the error of a promoted trial whose continuation failed begins (what the views count such trials by)
CONTINUATION_FAILED = "its continuation failed"


def failed_continuation(before: Result, failed: Result) -> Result:
    """A promoted trial's continuation that failed: the trial ends STOPPED at what it measured before (its score,
    epoch and metrics), with the failure said in its error and the continuation's times, worker and learning curve;
    a FAILED result in its place hid the score it had (a run's best, maybe) from every table, while best.json kept
    naming it. The scheduler hears a result at the epoch it had: the trial is done, never promoted again.

    >>> before = Result(3, Outcome.PAUSED, 0.25, epoch=1)
    >>> r = failed_continuation(before, Result.failed(3, "RuntimeError: boom", FailureKind.ERROR, epoch=2))
    >>> r.outcome.value, r.score, r.epoch, r.error
    ('STOPPED', 0.25, 1, 'its continuation failed (ERROR): RuntimeError: boom')
    """
    kind = failed.failure.value if failed.failure is not None else "FAILED"
    return dataclasses.replace(before, outcome=Outcome.STOPPED, error=f"{CONTINUATION_FAILED} ({kind}): "
                               f"{failed.error}", history=failed.history, start_time=failed.start_time,
                               end_time=failed.end_time, worker=failed.worker, node=failed.node)


__all__ = ["CONTINUATION_FAILED", "FailureWatch", "TrialBook", "TrialRecord", "failed_continuation"]
