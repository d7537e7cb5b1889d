"""The scheduler interface: a pure, seeded object that decides on a trial's intermediate results.

A scheduler composes with any strategy: the strategy proposes trials, the scheduler decides, epoch by
epoch, whether each one goes on. It never sees Ray, threads or clocks. Everything the loop uses of it:

- ``rungs`` (the epochs where a worker waits for the answer to its report) and ``pauses`` (whether it ever
  says PAUSE, so every trial must keep a checkpoint);
- ``on_start(trial_id)`` when a trial is submitted (a promoted one again);
- ``on_report(trial_id, epoch, score)`` after each epoch (``epoch`` = epochs trained so far, from 1;
  ``score`` higher is better) answers CONTINUE, STOP or PAUSE (PAUSE: end the run and keep the
  checkpoint; only schedulers with ``pauses`` True say it);
- ``on_result`` when a trial ends by itself, ``on_failed`` when it failed;
- ``promote()`` when a worker is free, before asking the strategy: a paused trial to continue from
  its checkpoint, or None (always None unless ``pauses``);
- ``state_dict()`` / ``load_state_dict()`` for snapshots and resume (replay calls the same points again).

A new scheduler is one file in ``nas/schedulers`` with a ``@register_scheduler("name")`` subclass implementing
``_decide`` (and ``_promote`` where it pauses); tests/test_schedulers.py runs every registered one through the same
contract.

Reports are tolerated in any state: a trial the scheduler never saw starts on its first report; a
late report of a trial already stopped, finished or failed gets STOP (a stop lands within an epoch);
a non-finite score stops the trial; a repeated epoch (a trial restarted without its checkpoint, or re-run
by a resume after the driver died) gets CONTINUE and changes nothing, up to the epoch at which it was
stopped or paused, which gets that answer again. The state (``state_dict``) is plain JSON data for snapshots.

>>> from nas.core.scheduler import make_scheduler
>>> asha = make_scheduler("asha", max_epochs=9, seed=0)
>>> asha.rungs
(1, 3, 9)
>>> [asha.on_report(t, 1, s).value for t, s in enumerate([0.5, 0.2, 0.4, 0.9])]
['CONTINUE', 'STOP', 'STOP', 'CONTINUE']
>>> make_scheduler("asha", max_epochs=9, options={"etaa": 2})
Traceback (most recent call last):
...
ValueError: unknown options ['etaa'] for scheduler 'asha' (did you mean 'eta'?); allowed: ['eta', 'grace_period', ...]
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

import numpy as np

from nas.core.nearest import did_you_mean
from nas.core.types import Decision, finite_score


class Phase(StrEnum):
    """Where a trial stands with the scheduler."""

    RUNNING = "RUNNING"
    PAUSING = "PAUSING"  # told to pause; its run (and checkpoint) has not ended yet: not promotable
    PAUSED = "PAUSED"
    STOPPED = "STOPPED"
    DONE = "DONE"
    FAILED = "FAILED"


ENDED = (Phase.STOPPED, Phase.DONE, Phase.FAILED)


@dataclasses.dataclass
class SchedulerRecord:
    """One trial as the scheduler sees it: its phase, the last epoch it reported and that score."""

    phase: Phase = Phase.RUNNING
    epoch: int = 0
    score: float | None = None


@dataclasses.dataclass(frozen=True)
class Promotion:
    """A paused trial to continue: from its checkpoint at ``epoch`` until it reaches ``until``."""

    trial_id: int
    epoch: int
    until: int


def check_int(name: str, value: Any, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


class Scheduler:
    """Base class; subclasses implement :meth:`_decide` (and :meth:`_promote` when they pause).

    ``max_epochs`` is the most any trial trains (R); ``rungs`` the epochs at which decisions can be
    other than CONTINUE, the last one ``max_epochs`` (empty where every epoch counts, as the median rule);
    ``pauses`` says whether trials pause and need their checkpoints kept.
    """

    registered_name: str = ""
    pauses: bool = False

    def __init__(self, *, max_epochs: int, seed: int | None = None) -> None:
        self.max_epochs = check_int("max_epochs", max_epochs)
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.trials: dict[int, SchedulerRecord] = {}

    @property
    def name(self) -> str:
        return self.registered_name or type(self).__name__

    @property
    def rungs(self) -> tuple[int, ...]:
        return ()

    # -- the loop's calls ------------------------------------------------------------------------
    def on_start(self, trial_id: int) -> None:
        """A new trial was submitted (called implicitly by its first report if the loop did not)."""
        trial_id = int(trial_id)
        if trial_id not in self.trials:
            self.trials[trial_id] = SchedulerRecord()
            self._on_start(trial_id)

    def on_report(self, trial_id: int, epoch: int, score: float) -> Decision:
        """The trial's score after ``epoch`` epochs: CONTINUE, STOP or PAUSE."""
        trial_id, epoch = int(trial_id), check_int("epoch", epoch)
        self.on_start(trial_id)
        record = self.trials[trial_id]
        if record.phase in ENDED or record.phase in (Phase.PAUSING, Phase.PAUSED):
            if epoch < record.epoch:  # a restarted run (a resume re-runs it) goes on to where it was decided
                return Decision.CONTINUE
            return Decision.STOP if record.phase in ENDED else Decision.PAUSE
        value = finite_score(score)
        if value is None:
            record.phase = Phase.STOPPED
            return Decision.STOP
        if epoch <= record.epoch:
            return Decision.CONTINUE
        record.epoch, record.score = epoch, value
        decision = self._decide(trial_id, epoch, value)
        if decision is Decision.STOP:
            record.phase = Phase.STOPPED
        elif decision is Decision.PAUSE:
            record.phase = Phase.PAUSING
        return decision

    def on_result(self, trial_id: int, epoch: int, score: float | None) -> None:
        """The trial ended by itself after ``epoch`` epochs (an epoch it did not report is taken in)."""
        trial_id = int(trial_id)
        self.on_start(trial_id)
        record = self.trials[trial_id]
        if record.phase not in ENDED and score is not None and epoch > record.epoch:
            self.on_report(trial_id, epoch, score)
        if record.phase is Phase.PAUSING:  # its run ended at the pause, its checkpoint kept: promotable now
            record.phase = Phase.PAUSED
        elif record.phase is Phase.RUNNING:
            record.phase = Phase.DONE

    def on_failed(self, trial_id: int) -> None:
        """The trial failed; it is never promoted, and what it recorded at rungs stays."""
        trial_id = int(trial_id)
        self.on_start(trial_id)
        if self.trials[trial_id].phase is not Phase.FAILED:
            self.trials[trial_id].phase = Phase.FAILED
            self._on_failed(trial_id)

    def expendable(self, kept: Sequence[int]) -> int | None:
        """Of the trials whose checkpoints the executor keeps (``kept``, oldest first), the one to drop when its
        bound is reached; None: the oldest. A scheduler that pauses names the one least likely to be continued."""
        return None

    def promote(self) -> Promotion | None:
        """A paused trial to continue now (it is RUNNING again from here on), or None."""
        promotion = self._promote()
        if promotion is not None:
            self.trials[promotion.trial_id].phase = Phase.RUNNING
        return promotion

    # -- for subclasses --------------------------------------------------------------------------
    def _on_start(self, trial_id: int) -> None:
        pass

    def _on_failed(self, trial_id: int) -> None:
        pass

    def _decide(self, trial_id: int, epoch: int, score: float) -> Decision:
        raise NotImplementedError

    def _promote(self) -> Promotion | None:
        return None

    # -- resume ----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Plain JSON data: the rng and every trial's record; subclasses add theirs."""
        return {"rng": self.rng.bit_generator.state,
                "trials": [[t, r.phase.value, r.epoch, r.score] for t, r in self.trials.items()]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.trials = {int(t): SchedulerRecord(Phase(p), int(e), s) for t, p, e, s in state["trials"]}


def make_scheduler(name: str, *, max_epochs: int, seed: int | None = None,
                   options: Mapping[str, Any] | None = None) -> Scheduler:
    """A registered scheduler with its options checked by name before construction."""
    from nas.core.registry import schedulers

    cls = schedulers.get(name)
    options = dict(options or {})
    params = inspect.signature(cls.__init__).parameters
    allowed = [p for p, v in params.items()
               if v.kind is inspect.Parameter.KEYWORD_ONLY and p not in ("seed", "max_epochs")]
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"unknown options {unknown} for scheduler {name!r}{did_you_mean(unknown, allowed)}; "
                         f"allowed: {allowed}")
    scheduler: Scheduler = cls(max_epochs=max_epochs, seed=seed, **options)
    return scheduler


__all__ = ["Phase", "Promotion", "Scheduler", "SchedulerRecord", "make_scheduler"]
