"""The search loop: the only place that knows about concurrency.

Whenever the executor has a free slot the loop asks the strategy for a trial and submits it; then it
waits for the first completion, journals it, tells the strategy, and fills the slot again. There is no
generation barrier: a fast trial's slot is refilled while slow ones still run.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nas.executor import Executor
from nas.journal import Journal, atomic_write
from nas.strategy import Strategy
from nas.types import Result, Trial, TrialState


@dataclasses.dataclass
class TrialRecord:
    trial: Trial
    state: TrialState
    result: Result | None = None
    submitted_at: float = 0.0


class Callback:
    """Hooks for progress display, metrics and the like. Each gets the loop, read-only."""

    def on_start(self, loop: SearchLoop) -> None: ...
    def on_submit(self, loop: SearchLoop, trial: Trial) -> None: ...
    def on_result(self, loop: SearchLoop, trial: Trial, result: Result) -> None: ...
    def on_end(self, loop: SearchLoop) -> None: ...


class SearchLoop:
    """Runs ``strategy`` on ``executor`` until ``budget`` trials have finished (COMPLETE or FAILED), or
    ``time_budget`` seconds have passed on the executor's clock (trials still running then are left
    unfinished and unjournaled)."""

    def __init__(
        self,
        strategy: Strategy,
        executor: Executor,
        *,
        budget: int | None = None,
        time_budget: float | None = None,
        journal: Journal | None = None,
        callbacks: Sequence[Callback] = (),
        best_weights: Path | None = None,
        poll_timeout: float = 1.0,
    ) -> None:
        if budget is None and time_budget is None:
            raise ValueError("give a budget (trials) or a time_budget (seconds), or both")
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
            raise ValueError(f"budget must be an integer >= 1, got {budget!r}")
        if time_budget is not None and not time_budget > 0:
            raise ValueError(f"time_budget must be > 0 seconds, got {time_budget!r}")
        self.strategy = strategy
        self.executor = executor
        self.budget = budget if budget is not None else 2**62
        self.time_budget = time_budget
        self.journal = journal
        self.callbacks = list(callbacks)
        self.best_weights = best_weights
        self.poll_timeout = poll_timeout
        self.records: dict[int, TrialRecord] = {}
        self.best: tuple[Trial, Result] | None = None
        self.started_at = self.clock()
        self.strategy_seconds = 0.0  # time spent inside ask/tell, for the overhead figures
        self.busy_seconds = 0.0  # summed trial durations, for worker utilization

    def clock(self) -> float:
        """Seconds on the executor's clock: simulated time for a simulated executor, else wall time."""
        now = self.executor.now()
        return time.time() if now is None else now

    @property
    def elapsed(self) -> float:
        return self.clock() - self.started_at

    def out_of_time(self) -> bool:
        return self.time_budget is not None and self.elapsed >= self.time_budget

    # -- state, derived from the records ------------------------------------------------------
    def count(self, *states: TrialState) -> int:
        return sum(1 for r in self.records.values() if r.state in states)

    @property
    def finished(self) -> int:
        return self.count(TrialState.COMPLETE, TrialState.FAILED)

    @property
    def running(self) -> int:
        return self.count(TrialState.RUNNING)

    @property
    def best_score(self) -> float | None:
        return self.best[1].score if self.best else None

    def results(self) -> list[tuple[Trial, Result]]:
        return [(r.trial, r.result) for r in self.records.values() if r.result is not None]

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> list[tuple[Trial, Result]]:
        for cb in self.callbacks:
            cb.on_start(self)
        try:
            while self.finished < self.budget and not self.out_of_time():
                self._fill()
                if self.running == 0:
                    raise RuntimeError(
                        f"strategy {self.strategy.name!r} proposed nothing with no trial running "
                        f"({self.finished}/{self.budget} finished): the search cannot go on"
                    )
                for trial, result in self.executor.poll(timeout=self.poll_timeout):
                    self._finish(trial, result)
        finally:
            for cb in self.callbacks:
                cb.on_end(self)
        return self.results()

    def _fill(self) -> None:
        while self.executor.free_slots() > 0 and self.finished + self.running < self.budget:
            t0 = time.perf_counter()
            trial = self.strategy.ask()
            self.strategy_seconds += time.perf_counter() - t0
            if trial is None:
                return
            if trial.trial_id in self.records:
                raise RuntimeError(f"strategy {self.strategy.name!r} reused trial id {trial.trial_id}")
            self.records[trial.trial_id] = TrialRecord(trial, TrialState.RUNNING, submitted_at=self.clock())
            self.executor.submit(trial)
            for cb in self.callbacks:
                cb.on_submit(self, trial)

    def _finish(self, trial: Trial, result: Result) -> None:
        if result.state is TrialState.COMPLETE and (result.score is None or not math.isfinite(result.score)):
            result = dataclasses.replace(result, state=TrialState.FAILED,
                                         error=f"non-finite score {result.score!r}")
        record = self.records[trial.trial_id]
        record.state, record.result = result.state, result
        if result.start_time is not None and result.end_time is not None:
            self.busy_seconds += result.end_time - result.start_time
        if self.journal is not None:
            self.journal.append(trial, result)  # on disk before anyone else hears of it
        t0 = time.perf_counter()
        self.strategy.tell(trial, result)
        self.strategy_seconds += time.perf_counter() - t0
        if result.ok and (self.best is None or result.score > self.best[1].score):  # type: ignore[operator]
            self.best = (trial, result)
            self._save_best_weights(trial)
        for cb in self.callbacks:
            cb.on_result(self, trial, result)

    def _save_best_weights(self, trial: Trial) -> None:
        if self.best_weights is None:
            return
        ckpt = self.executor.checkpoint(trial.trial_id)
        if ckpt is not None:
            atomic_write(self.best_weights, ckpt)

    def summary(self) -> dict[str, Any]:
        wall = self.elapsed
        return {
            "finished": self.finished, "failed": self.count(TrialState.FAILED),
            "best_score": self.best_score, "wall_seconds": wall,
            "utilization": self.busy_seconds / (self.executor.slots * wall) if wall > 0 else 0.0,
            "strategy_seconds": self.strategy_seconds,
        }
