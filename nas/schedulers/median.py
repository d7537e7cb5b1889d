"""The median stopping rule (Golovin et al., "Google Vizier: A Service for Black-Box Optimization",
KDD 2017, section 3.2.2).

A trial is stopped after epoch t when its best score so far is strictly below the median, over the
other trials that have reached epoch t, of their running averages (the mean of their scores at epochs
1..t). Vizier takes the median over completed trials; here every other trial that got as far counts
(stopped and running ones too; failed ones do not), so the rule acts from the first trials on, as Ray
Tune's median stopping does. No decision before ``grace_period`` epochs or with fewer than
``min_samples`` such trials. Scores are higher-is-better.

>>> med = MedianStopping(max_epochs=10, seed=0, min_samples=2)
>>> for t, curve in enumerate([[0.5, 0.6], [0.7, 0.8]]):
...     for epoch, score in enumerate(curve, 1):
...         _ = med.on_report(t, epoch, score)
>>> med.on_report(2, 1, 0.55).value   # medians of running averages at epoch 1: (0.5 + 0.7) / 2 = 0.6
'STOP'
>>> med.on_report(3, 1, 0.65).value
'CONTINUE'
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from typing import Any

from nas.core.registry import register_scheduler
from nas.core.scheduler import Phase, Scheduler, check_int
from nas.core.types import Decision


@register_scheduler("median")
class MedianStopping(Scheduler):
    """Options: ``grace_period`` (epochs before any stop, default 1), ``min_samples`` (other trials
    needed at an epoch before it can stop a trial, default 3)."""

    def __init__(self, *, max_epochs: int, seed: int | None = None, grace_period: int = 1,
                 min_samples: int = 3) -> None:
        super().__init__(max_epochs=max_epochs, seed=seed)
        self.grace_period = check_int("grace_period", grace_period)
        if self.grace_period > self.max_epochs:
            raise ValueError(f"grace_period must be <= max_epochs ({self.max_epochs}), got {grace_period}")
        self.min_samples = check_int("min_samples", min_samples)
        # trial -> its epochs and the running sums of its scores (prefix sums: a running mean is O(log n))
        self.epochs: dict[int, list[int]] = {}
        self.sums: dict[int, list[float]] = {}
        self.best: dict[int, float] = {}
        # epoch t -> sorted (running mean up to t, trial) of every trial past t: a median is O(1)
        self.at_epoch: dict[int, list[tuple[float, int]]] = {}

    def running_mean(self, trial_id: int, epoch: int) -> float | None:
        """The mean of ``trial_id``'s scores at epochs <= ``epoch``; None if it has not reached ``epoch``
        or reported nothing up to it."""
        epochs = self.epochs.get(trial_id, [])
        if not epochs or epochs[-1] < epoch:
            return None
        i = bisect.bisect_right(epochs, epoch)  # its reports at epochs <= epoch (a trial may skip some)
        return self.sums[trial_id][i - 1] / i if i else None

    def _passed(self, trial_id: int, epochs: range) -> list[tuple[int, tuple[float, int]]]:
        return [(t, (m, trial_id)) for t in epochs if (m := self.running_mean(trial_id, t)) is not None]

    def _decide(self, trial_id: int, epoch: int, score: float) -> Decision:
        epochs = self.epochs.setdefault(trial_id, [])
        previous = epochs[-1] if epochs else 0
        epochs.append(epoch)
        sums = self.sums.setdefault(trial_id, [])
        sums.append((sums[-1] if sums else 0.0) + score)
        self.best[trial_id] = max(self.best.get(trial_id, score), score)
        decision = Decision.CONTINUE
        others = self.at_epoch.get(epoch, [])  # this trial is not in it yet
        if self.grace_period <= epoch < self.max_epochs and len(others) >= self.min_samples:
            n = len(others)
            median = others[n // 2][0] if n % 2 else (others[n // 2 - 1][0] + others[n // 2][0]) / 2
            if self.best[trial_id] < median:
                decision = Decision.STOP
        for t, entry in self._passed(trial_id, range(previous + 1, epoch + 1)):
            bisect.insort(self.at_epoch.setdefault(t, []), entry)
        return decision

    def _on_failed(self, trial_id: int) -> None:
        if trial_id in self.epochs:
            for t, entry in self._passed(trial_id, range(1, self.epochs[trial_id][-1] + 1)):
                self.at_epoch[t].remove(entry)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["curves"] = [[t, self.epochs[t], self.sums[t], self.best[t]] for t in self.epochs]
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.epochs, self.sums, self.best = {}, {}, {}
        for t, epochs, sums, best in state["curves"]:
            self.epochs[int(t)], self.sums[int(t)], self.best[int(t)] = list(epochs), list(sums), float(best)
        self.at_epoch = {}
        for t in self.epochs:
            if self.trials[t].phase is not Phase.FAILED:
                for epoch, entry in self._passed(t, range(1, self.epochs[t][-1] + 1)):
                    self.at_epoch.setdefault(epoch, []).append(entry)
        for entries in self.at_epoch.values():
            entries.sort()


__all__ = ["MedianStopping"]
