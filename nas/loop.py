"""The search loop: the only place that knows about concurrency.

Whenever the executor has a free slot the loop asks the strategy for a trial and submits it; then it
waits for the first completion, journals it, tells the strategy, and fills the slot again. There is no
generation barrier: a fast trial's slot is refilled while slow ones still run.

With ``state_path`` the loop is crash-safe: each finished trial is journaled before the strategy is
told, and the strategy's state is saved atomically after every round of tells and asks, so a run can
be resumed after any crash (see :mod:`nas.resume`). With ``stop`` (a :class:`nas.resume.StopSignal`)
it stops gracefully when asked: no new trials, the running ones cancelled or awaited.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nas.engine.executor import Event, EventKind, Executor
from nas.journal import Journal, atomic_write
from nas.resume import SavedState, StopSignal
from nas.resume import save_state as write_state
from nas.space import InvalidSpace
from nas.strategy import Strategy
from nas.types import Result, Trial, TrialState


@dataclasses.dataclass
class TrialRecord:
    trial: Trial
    state: TrialState
    result: Result | None = None
    submitted_at: float = 0.0
    started_at: float | None = None  # when its worker began it (QUEUED -> RUNNING), the executor's clock


class Callback:
    """Hooks for progress display, metrics and the like. Each gets the loop, read-only."""

    def on_start(self, loop: SearchLoop) -> None: ...
    def on_submit(self, loop: SearchLoop, trial: Trial) -> None: ...
    def on_event(self, loop: SearchLoop, event: Event) -> None: ...  # started / report, after the loop's update
    def on_result(self, loop: SearchLoop, trial: Trial, result: Result) -> None: ...
    def on_end(self, loop: SearchLoop) -> None: ...


class SearchLoop:
    """Runs ``strategy`` on ``executor`` until ``budget`` trials have finished (COMPLETE or FAILED), or
    ``time_budget`` seconds have passed on the executor's clock (trials still running then are left
    unfinished and unjournaled), or ``stop`` is requested (then ``interrupted`` is True; trials that
    were cancelled are left PENDING and unjournaled, and a resume re-runs them).

    A space whose ``build`` fails for some architectures makes FAILED trials (data, like a NaN loss);
    one whose build failed for each of the first ``broken_space_trials`` finished trials (and none got
    past it) is broken, and the search stops with :class:`nas.space.InvalidSpace` and the first error."""

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
        state_path: Path | None = None,
        stop: StopSignal | None = None,
        broken_space_trials: int | None = 5,
        checkpoint_dir: Path | None = None,
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
        self._tally: collections.Counter[TrialState] = collections.Counter()
        self.best: tuple[Trial, Result] | None = None
        self.started_at = self.clock()
        self.strategy_seconds = 0.0  # time spent inside ask/tell, for the overhead figures
        self.busy_seconds = 0.0  # summed trial durations, for worker utilization
        self.state_path = state_path
        self.stop = stop
        self.interrupted = False
        self.resumed = 0  # trials loaded from the journal by restore()
        self.requeue: collections.deque[Trial] = collections.deque()  # in flight at a crash: run first
        self._journaled = 0  # journal records appended (and told), in journal order
        self._dirty = True  # something changed since the state was last saved
        self.broken_space_trials = broken_space_trials
        self.checkpoint_dir = checkpoint_dir  # where checkpoints that later trials start from are kept
        self._kept: collections.deque[int] = collections.deque()  # their trial ids, oldest first
        self._build_failures = 0  # finished trials whose space.build raised or returned a non-module
        self._space_ok = False  # some finished trial got past the build

    def clock(self) -> float:
        """Seconds on the executor's clock: simulated time for a simulated executor, else wall time."""
        now = self.executor.now()
        return time.time() if now is None else now

    @property
    def elapsed(self) -> float:
        return self.clock() - self.started_at

    def out_of_time(self) -> bool:
        return self.time_budget is not None and self.elapsed >= self.time_budget

    # -- state: the records, with a tally kept in step (O(1) counts at 100,000 trials) ----------
    def count(self, *states: TrialState) -> int:
        return sum(self._tally[s] for s in states)

    def _add(self, record: TrialRecord) -> None:
        self.records[record.trial.trial_id] = record
        self._tally[record.state] += 1

    def _move(self, record: TrialRecord, state: TrialState) -> None:
        self._tally[record.state] -= 1
        self._tally[state] += 1
        record.state = state

    @property
    def finished(self) -> int:
        return self.count(TrialState.COMPLETE, TrialState.FAILED)

    @property
    def running(self) -> int:
        """Trials a worker is training now."""
        return self.count(TrialState.RUNNING)

    @property
    def queued(self) -> int:
        """Trials submitted that no worker has begun yet (prefetched behind a running one, or in transit)."""
        return self.count(TrialState.QUEUED)

    @property
    def in_flight(self) -> int:
        return self.count(TrialState.QUEUED, TrialState.RUNNING)

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
                if self.stop is not None and self.stop.requested:
                    self._stop_in_flight()
                    break
                self._fill()
                self.save_state()
                if self.in_flight == 0 and self.executor.free_slots() > 0:  # (none free: workers restart)
                    raise RuntimeError(
                        f"strategy {self.strategy.name!r} proposed nothing with no trial running "
                        f"({self.finished}/{self.budget} finished): the search cannot go on"
                    )
                self._handle(self.executor.poll(timeout=self.poll_timeout))
            self.save_state()
        finally:
            for cb in self.callbacks:
                cb.on_end(self)
        return self.results()

    def _fill(self) -> None:
        while self.executor.free_slots() > 0 and self.finished + self.in_flight < self.budget:
            if self.requeue:
                trial = self.requeue.popleft()
            else:
                t0 = time.perf_counter()
                trial = self.strategy.ask()  # type: ignore[assignment]
                self.strategy_seconds += time.perf_counter() - t0
                if trial is None:
                    return
            if trial.trial_id in self.records:
                raise RuntimeError(f"strategy {self.strategy.name!r} reused trial id {trial.trial_id}")
            self._add(TrialRecord(trial, TrialState.QUEUED, submitted_at=self.clock()))
            self._dirty = True
            self.executor.submit(trial)
            for cb in self.callbacks:
                cb.on_submit(self, trial)

    def _handle(self, events: Sequence[Event]) -> None:
        """Apply the executor's events in order: ``started`` moves a trial from QUEUED to RUNNING,
        ``requeued`` back, ``finished`` ends it; callbacks hear of every event."""
        for event in events:
            if event.kind is EventKind.FINISHED:
                self._finish(event.trial, event.result)  # type: ignore[arg-type]
                continue
            record = self.records.get(event.trial.trial_id)
            if record is None or record.state in (TrialState.COMPLETE, TrialState.FAILED):
                continue  # an event of a trial this loop does not hold (or no longer runs): nothing to count
            if event.kind is EventKind.STARTED and record.state is not TrialState.RUNNING:
                self._move(record, TrialState.RUNNING)
                record.started_at = event.time
            elif event.kind is EventKind.REQUEUED and record.state is TrialState.RUNNING:
                self._move(record, TrialState.QUEUED)  # its worker died: it waits to run again
            for cb in self.callbacks:
                cb.on_event(self, event)

    def _finish(self, trial: Trial, result: Result) -> None:
        if result.state is TrialState.COMPLETE and (result.score is None or not math.isfinite(result.score)):
            result = dataclasses.replace(result, state=TrialState.FAILED,
                                         error=f"non-finite score {result.score!r}")
        record = self.records[trial.trial_id]
        self._move(record, result.state)
        record.result = result
        if result.start_time is not None and result.end_time is not None:
            self.busy_seconds += result.end_time - result.start_time
        if result.ok and trial.save_checkpoint:
            self._keep_checkpoint(trial.trial_id)  # before the journal: a journaled trial has its checkpoint
        if self.journal is not None:
            self.journal.append(trial, result)  # on disk before anyone else hears of it
        self._journaled += 1
        self._dirty = True
        t0 = time.perf_counter()
        self.strategy.tell(trial, result)
        self.strategy_seconds += time.perf_counter() - t0
        if result.ok and (self.best is None or result.score > self.best[1].score):  # type: ignore[operator]
            self.best = (trial, result)
            self._save_best_weights(trial)
        for cb in self.callbacks:
            cb.on_result(self, trial, result)
        self._check_space(result)

    def _check_space(self, result: Result) -> None:
        if self._space_ok or self.broken_space_trials is None:
            return
        if result.ok or not (result.error or "").startswith(InvalidSpace.__name__ + ":"):
            self._space_ok = True
            return
        self._build_failures += 1
        if self._build_failures >= self.broken_space_trials:
            first = next(r.result.error for r in self.records.values()
                         if r.result is not None and r.result.error).splitlines()[0]
            raise InvalidSpace(
                f"the space's build failed for each of the first {self._build_failures} trials, so the "
                f"search stops (fix the space, then resume): {first.removeprefix('InvalidSpace: ')}"
            )

    def _stop_in_flight(self) -> None:
        """A requested stop: await the running trials ("wait"), or cancel them ("cancel") and leave
        them PENDING, unjournaled, in the saved state's in-flight list (a resume re-runs them)."""
        self.interrupted = True
        if self.stop is not None and self.stop.mode == "wait":
            while self.in_flight:
                self._handle(self.executor.poll(timeout=self.poll_timeout))
        for record in self.records.values():
            if record.state in (TrialState.QUEUED, TrialState.RUNNING):
                self.executor.stop(record.trial.trial_id)
                self._move(record, TrialState.PENDING)
        self._dirty = True
        self.save_state()

    # -- crash safety --------------------------------------------------------------------------
    def save_state(self) -> None:
        """Save the strategy's state, the journal count and the trials in flight (atomically), if
        anything changed since the last save and the loop has a ``state_path``."""
        if self.state_path is None or not self._dirty:
            return
        inflight = [r.trial for r in self.records.values()
                    if r.state in (TrialState.QUEUED, TrialState.RUNNING, TrialState.PENDING)] + list(self.requeue)
        write_state(self.state_path, self.strategy, self._journaled, inflight)
        self._dirty = False

    def restore(self, journaled: Sequence[tuple[Trial, Result]], saved: SavedState | None) -> None:
        """Continue a crashed or stopped run: ``journaled`` is its journal (in order), ``saved`` its
        saved state (None only when it has no journal records yet). Journaled trials become finished
        records; those journaled after the last save are told now; saved in-flight trials that never
        finished are re-queued, to run before the strategy is asked for new ones."""
        if saved is None:
            if journaled:
                raise ValueError("the run has journaled trials but no saved strategy state "
                                 "(strategy.pkl): it was not written by a resumable search")
            return
        if saved.strategy != self.strategy.name:
            raise ValueError(f"the saved state belongs to strategy {saved.strategy!r}, "
                             f"not {self.strategy.name!r}")
        if saved.journaled > len(journaled):
            raise ValueError(f"the saved state has been told {saved.journaled} trials, the journal holds "
                             f"only {len(journaled)}: the run directory is inconsistent")
        if len(journaled) > self.budget:
            raise ValueError(f"the run has {len(journaled)} finished trials, more than budget={self.budget}")
        self.strategy.load_state_dict(saved.state)
        for i, (trial, result) in enumerate(journaled):
            if trial.trial_id in self.records:
                raise ValueError(f"the journal holds trial {trial.trial_id} twice: it is corrupt")
            self._add(TrialRecord(trial, result.state, result))
            if i >= saved.journaled:  # journaled, then the crash came before the state was saved
                self.strategy.tell(trial, result)
            if not result.ok and (result.error or "").startswith(InvalidSpace.__name__ + ":"):
                self._build_failures += 1
            else:
                self._space_ok = True
            if result.ok and (self.best is None or result.score > self.best[1].score):  # type: ignore[operator]
                self.best = (trial, result)
        self.requeue.extend(t for t in saved.inflight if t.trial_id not in self.records)
        self._restore_checkpoints()
        self._journaled = self.resumed = len(journaled)
        self._dirty = True

    def _keep_checkpoint(self, trial_id: int) -> None:
        """Write a finished trial's checkpoint (one that later trials may start from, as PBT's) to
        ``checkpoint_dir``, so it outlives the driver; the oldest beyond the executor's bound go."""
        if self.checkpoint_dir is None:
            return
        data = self.executor.checkpoint(trial_id)
        if data is None:
            return
        self.checkpoint_dir.mkdir(exist_ok=True)
        atomic_write(self.checkpoint_dir / f"{trial_id}.pt", data)
        self._kept.append(trial_id)
        while len(self._kept) > self.executor.checkpoint_keep:
            (self.checkpoint_dir / f"{self._kept.popleft()}.pt").unlink(missing_ok=True)

    def _restore_checkpoints(self) -> None:
        if self.checkpoint_dir is None or not self.checkpoint_dir.is_dir():
            return
        kept = sorted(int(p.stem) for p in self.checkpoint_dir.glob("*.pt") if p.stem.isdigit())
        for trial_id in kept:
            record = self.records.get(trial_id)
            if record is not None and record.result is not None and record.result.ok:
                self.executor.restore_checkpoint(trial_id, (self.checkpoint_dir / f"{trial_id}.pt").read_bytes())
                self._kept.append(trial_id)

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
            "utilization": self.busy_seconds / (max(self.executor.slots, 1) * wall) if wall > 0 else 0.0,
            "strategy_seconds": self.strategy_seconds, "resumed": self.resumed, "interrupted": self.interrupted,
        }
