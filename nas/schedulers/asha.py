"""ASHA: asynchronous successive halving (Li et al., "A System for Massively Parallel Hyperparameter
Tuning", MLSys 2020), in its two published variants.

Rungs lie at ``grace_period * eta**k`` epochs below ``max_epochs``, and at ``max_epochs`` (1, 3, 9, 27 for
grace 1, eta 3, 27 epochs). There is no rung barrier: every decision uses the results recorded at the rung
so far. A result is "in the top 1/eta" of a rung holding n results when its rank r (1 = best; ties share
the better rank) has ``r * eta <= n``.

- ``variant="stopping"`` (as Ray Tune's and Syne Tune's stopping ASHA): a trial reaching a rung is recorded
  there and stopped unless it is in the top 1/eta of the rung or the best there so far (so the first
  trial at a rung goes on).
- ``variant="promotion"`` (the paper's Algorithm 2): a trial reaching a rung is recorded and PAUSED with its
  checkpoint. When a worker is free, :meth:`promote` returns the best paused, not yet promoted trial
  at the highest rung where one is in the top 1/eta; it continues to the next rung. The strategy is told
  a trial's highest-rung result (:meth:`ASHA.rung_result`).

Trials must report every epoch (a rung skipped over is not judged). Scores are higher-is-better.

>>> asha = ASHA(max_epochs=27, seed=0, variant="promotion")
>>> asha.rungs
(1, 3, 9, 27)
>>> [asha.on_report(t, 1, s).value for t, s in enumerate([0.3, 0.9, 0.5])]
['PAUSE', 'PAUSE', 'PAUSE']
>>> asha.promote() is None   # not before their runs have ended, their checkpoints kept
True
>>> for t, s in enumerate([0.3, 0.9, 0.5]): asha.on_result(t, 1, s)
>>> asha.promote()
Promotion(trial_id=1, epoch=1, until=3)
>>> asha.promote() is None   # 3 results at rung 1: only the best one is in the top 1/3
True
"""

from __future__ import annotations

import bisect
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from nas.core.registry import register_scheduler
from nas.core.scheduler import ENDED, Phase, Promotion, Scheduler, check_int
from nas.core.types import Decision

VARIANTS = ("stopping", "promotion")


def rung_levels(max_epochs: int, grace_period: int, eta: float) -> tuple[int, ...]:
    """``grace_period * eta**k`` (rounded) below ``max_epochs``, then ``max_epochs``.

    >>> rung_levels(27, 1, 3), rung_levels(200, 12, 3), rung_levels(10, 1, 2)
    ((1, 3, 9, 27), (12, 36, 108, 200), (1, 2, 4, 8, 10))
    """
    levels: list[int] = []
    k = 0
    while (level := round(grace_period * eta**k)) < max_epochs:
        if not levels or level > levels[-1]:
            levels.append(level)
        k += 1
    return (*levels, max_epochs)


def check_levels(levels: Any, max_epochs: int) -> tuple[int, ...]:
    """Rung levels given by hand: strictly increasing integers in [1, max_epochs]; max_epochs is added last.

    >>> check_levels([12, 200], 200), check_levels((1, 3), 9)
    ((12, 200), (1, 3, 9))
    """
    bad = ValueError(f"levels must be strictly increasing integers from 1 to max_epochs ({max_epochs}), "
                     f"got {levels!r}")
    if isinstance(levels, str | bytes) or not isinstance(levels, Sequence) or not levels:
        raise bad
    out: list[int] = []
    for level in levels:
        if isinstance(level, bool) or not isinstance(level, numbers.Integral) or not 1 <= int(level) <= max_epochs:
            raise bad
        if out and int(level) <= out[-1]:
            raise bad
        out.append(int(level))
    return (*out, max_epochs) if out[-1] < max_epochs else tuple(out)


class Bracket:
    """The rungs of one bracket: at each level, trial id -> [score, promoted]; the same results sorted
    best first as (-score, trial id), and those not promoted yet likewise, so a rank costs O(log n) and
    finding a promotion O(log n) per rung."""

    def __init__(self, levels: tuple[int, ...], eta: float) -> None:
        self.levels, self.eta = levels, eta
        self.recorded: list[dict[int, list[Any]]] = [{} for _ in levels]
        self.ordered: list[list[tuple[float, int]]] = [[] for _ in levels]
        self.waiting: list[list[tuple[float, int]]] = [[] for _ in levels]

    def record(self, trial_id: int, epoch: int, score: float) -> int | None:
        """Enter the result if ``epoch`` is a rung level; the rung's index, or None."""
        if epoch not in self.levels:
            return None
        k = self.levels.index(epoch)
        if trial_id not in self.recorded[k]:
            self.recorded[k][trial_id] = [score, False]
            bisect.insort(self.ordered[k], (-score, trial_id))
            bisect.insort(self.waiting[k], (-score, trial_id))
        return k

    def rank(self, k: int, score: float) -> int:
        """1 + the number of results at rung ``k`` strictly better than ``score``."""
        return 1 + bisect.bisect_left(self.ordered[k], -score, key=lambda entry: entry[0])

    def in_top(self, k: int, score: float) -> bool:
        return self.rank(k, score) * self.eta <= len(self.recorded[k])

    def promotable(self, phase: Callable[[int], Phase]) -> tuple[int, int] | None:
        """(rung index, trial id) of the best paused, unpromoted top-1/eta trial at the highest rung
        (ties: the lower trial id). Trials that ended while waiting (failed) leave the waiting list."""
        for k in range(len(self.levels) - 2, -1, -1):
            waiting = self.waiting[k]
            i = 0
            while i < len(waiting):
                neg, trial_id = waiting[i]
                state = phase(trial_id)
                if state in ENDED:
                    del waiting[i]
                elif state is not Phase.PAUSED:
                    i += 1
                else:  # the best one waiting: if it is not in the top, none is
                    if self.in_top(k, -neg):
                        return k, trial_id
                    break
        return None

    def highest(self, trial_id: int) -> int | None:
        """The index of the highest rung ``trial_id`` reached, or None before its first."""
        return next((k for k in range(len(self.levels) - 1, -1, -1) if trial_id in self.recorded[k]), None)

    def mark_promoted(self, k: int, trial_id: int) -> None:
        entry = self.recorded[k][trial_id]
        entry[1] = True
        self.waiting[k].remove((-entry[0], trial_id))

    def load(self, rungs: list[list[list[Any]]]) -> None:
        self.recorded = [{int(t): [float(v), bool(p)] for t, v, p in rung} for rung in rungs]
        self.ordered = [sorted((-v, t) for t, (v, _) in rung.items()) for rung in self.recorded]
        self.waiting = [sorted((-v, t) for t, (v, p) in rung.items() if not p) for rung in self.recorded]


@register_scheduler("asha")
class ASHA(Scheduler):
    """Asynchronous successive halving. Options: ``eta`` (reduction factor, > 1, default 3),
    ``grace_period`` (the first rung, in epochs, default 1), ``variant`` (stopping or promotion), ``levels``
    (the rungs themselves, increasing epochs up to ``max_epochs``, which is added if missing, instead of
    ``grace_period * eta**k``: rungs spaced otherwise than eta, as the 12- and 200-epoch schedules of
    NAS-Bench-201, ``levels=[12, 200]``; eta still sets the top fraction that goes on).

    >>> ASHA(max_epochs=200, levels=[12], eta=3).rungs
    (12, 200)
    >>> ASHA(max_epochs=200, levels=[12, 300])
    Traceback (most recent call last):
    ...
    ValueError: levels must be strictly increasing integers from 1 to max_epochs (200), got [12, 300]
    """

    #: what ``nas schedulers`` lists for a default of None (grace_period: 1, or the first of levels where given)
    shown_defaults: ClassVar[dict[str, Any]] = {"grace_period": 1}

    def __init__(self, *, max_epochs: int, seed: int | None = None, eta: float = 3, grace_period: int | None = None,
                 variant: str = "stopping", levels: Sequence[int] | None = None) -> None:
        super().__init__(max_epochs=max_epochs, seed=seed)
        if isinstance(eta, bool) or not isinstance(eta, numbers.Real) or not 1 < eta < math.inf:
            raise ValueError(f"eta must be a finite number > 1, got {eta!r}")
        if variant not in VARIANTS:
            raise ValueError(f"unknown ASHA variant {variant!r}; known: {', '.join(VARIANTS)}")
        self.eta: float = float(eta)
        if levels is not None:
            if grace_period is not None:
                raise ValueError(f"give levels or grace_period, not both; got levels={levels!r}, "
                                 f"grace_period={grace_period!r}")
            self.levels: tuple[int, ...] = check_levels(levels, self.max_epochs)
            grace_period = self.levels[0]
        grace_period = check_int("grace_period", 1 if grace_period is None else grace_period)
        if grace_period > self.max_epochs:
            raise ValueError(f"grace_period must be <= max_epochs ({self.max_epochs}), got {grace_period}")
        self.grace_period, self.variant = grace_period, variant
        self.pauses = variant == "promotion"
        if levels is None:
            self.levels = rung_levels(self.max_epochs, grace_period, eta)
        self.brackets: list[Bracket] = self._make_brackets()
        self.bracket_of: dict[int, int] = {}

    def _make_brackets(self) -> list[Bracket]:
        return [Bracket(self.levels, self.eta)]

    @property
    def rungs(self) -> tuple[int, ...]:
        return self.levels

    def _on_start(self, trial_id: int) -> None:
        self.bracket_of[trial_id] = 0

    def _decide(self, trial_id: int, epoch: int, score: float) -> Decision:
        bracket = self.brackets[self.bracket_of[trial_id]]
        k = bracket.record(trial_id, epoch, score)
        if k is None or epoch >= self.max_epochs:
            return Decision.CONTINUE
        if self.pauses:
            return Decision.PAUSE
        if bracket.rank(k, score) == 1 or bracket.in_top(k, score):
            return Decision.CONTINUE
        return Decision.STOP

    def _promote(self) -> Promotion | None:
        def phase(t: int) -> Phase:
            return self.trials[t].phase

        best: tuple[int, int, int] | None = None  # (level, bracket, trial)
        for b, bracket in enumerate(self.brackets):
            found = bracket.promotable(phase)
            if found is not None and (best is None or bracket.levels[found[0]] > best[0]):
                best = (bracket.levels[found[0]], b, found[1])
        if best is None:
            return None
        level, b, trial_id = best
        bracket = self.brackets[b]
        k = bracket.levels.index(level)
        bracket.mark_promoted(k, trial_id)
        return Promotion(trial_id, level, bracket.levels[k + 1])

    def expendable(self, kept: Sequence[int]) -> int | None:
        """The oldest kept trial that has ended (at the top rung, stopped or failed: never continued again); where
        none has, the paused one ranked lowest in its rung (by its place among the rung's results: the last a
        promotion reaches). A promoted trial (running again, perhaps still queued for its checkpoint) is never
        named. Checkpoints used to go oldest first, so a long run's late promotions of paused trials (their rung
        grew past them into its top 1/eta) failed as CHECKPOINT_MISSING: 30 of 1,500 trials of a toy search."""
        if not self.pauses:
            return None
        worst, worst_place = None, -1.0
        for trial_id in kept:
            record = self.trials.get(trial_id)
            if record is None or record.phase in ENDED:
                return trial_id
            if record.phase not in (Phase.PAUSING, Phase.PAUSED):
                continue
            bracket = self.brackets[self.bracket_of.get(trial_id, 0)]
            k = bracket.highest(trial_id)
            if k is not None:
                place = bracket.rank(k, bracket.recorded[k][trial_id][0]) / len(bracket.recorded[k])
                if place > worst_place:
                    worst, worst_place = trial_id, place
        return worst

    def rung_result(self, trial_id: int) -> tuple[int, float] | None:
        """(epoch, score) at the highest rung ``trial_id`` reached, or None before its first rung."""
        bracket = self.brackets[self.bracket_of.get(int(trial_id), 0)]
        k = bracket.highest(int(trial_id))
        return None if k is None else (bracket.levels[k], float(bracket.recorded[k][int(trial_id)][0]))

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["bracket_of"] = [[t, b] for t, b in self.bracket_of.items()]
        state["recorded"] = [[[[t, v, p] for t, (v, p) in rung.items()] for rung in bracket.recorded]
                             for bracket in self.brackets]
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.bracket_of = {int(t): int(b) for t, b in state["bracket_of"]}
        for bracket, rungs in zip(self.brackets, state["recorded"], strict=True):
            bracket.load(rungs)


__all__ = ["ASHA", "Bracket", "check_levels", "rung_levels"]
