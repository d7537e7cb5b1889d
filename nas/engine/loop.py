"""The search loop: the only place that knows about concurrency.

Whenever the executor has a free slot the loop asks the strategy for a trial and submits it; then it
waits for the first completion, journals it, tells the strategy, and fills the slot again. There is no
generation barrier: a fast trial's slot is refilled while slow ones still run.

With a ``store`` (the run directory's owner, :class:`nas.run.store.RunStore`) the loop is crash-safe and
writes no file itself: each submission is journaled, each batch of results is journaled with one fsync
before the strategy is told, and the store snapshots the strategy every K results or T seconds, so a
run can be resumed after any crash (:meth:`SearchLoop.restore`). With ``stop`` (a
:class:`nas.run.interrupt.StopSignal`) it stops gracefully when asked: no new trials, the running ones
cancelled or awaited.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from nas.core.space import InvalidSpace
from nas.core.strategy import Strategy
from nas.core.types import Decision, FailureKind, Result, Trial, TrialState
from nas.engine.protocol import Event, EventKind, Executor
from nas.run.journal import JournalWriter

if TYPE_CHECKING:
    from nas.core.scheduler import Scheduler
    from nas.run.interrupt import StopSignal
    from nas.run.store import Restored, RunStore


@dataclasses.dataclass(slots=True)
class TrialRecord:
    trial: Trial
    state: TrialState
    result: Result | None = None
    submitted_at: float = 0.0
    started_at: float | None = None  # when its worker began it (QUEUED -> RUNNING), the executor's clock
    runs: int = 1  # 1 + the promotions that continued it from its checkpoint
    epoch: int = 0  # the last epoch it reported
    decided: tuple[str, int] | None = None  # (STOP or PAUSE, the epoch of the report it answered)


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
    past it) is broken, and the search stops with :class:`nas.core.space.InvalidSpace` and the first error."""

    def __init__(
        self,
        strategy: Strategy,
        executor: Executor,
        *,
        budget: int | None = None,
        time_budget: float | None = None,
        journal: JournalWriter | None = None,
        store: RunStore | None = None,
        callbacks: Sequence[Callback] = (),
        poll_timeout: float = 1.0,
        stop: StopSignal | None = None,
        broken_space_trials: int | None = 5,
        scheduler: Scheduler | None = None,
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
        self.store = store
        self.journal = store.journal if store is not None else journal
        self.callbacks = list(callbacks)
        self.poll_timeout = poll_timeout
        self.records: dict[int, TrialRecord] = {}
        self._tally: collections.Counter[TrialState] = collections.Counter()
        self.best: tuple[Trial, Result] | None = None
        self.started_at = self.clock()
        self.strategy_seconds = 0.0  # time spent inside ask/tell, for the overhead figures
        self.busy_seconds = 0.0  # summed trial durations, for worker utilization
        self.stop = stop
        self.interrupted = False
        self.resumed = 0  # trials loaded from the journal by restore()
        self.requeue: collections.deque[Trial] = collections.deque()  # in flight at a crash: run first
        self._journaled = 0  # results journaled (and told), in journal order
        self.broken_space_trials = broken_space_trials
        self._build_failures = 0  # finished trials whose space.build raised or returned a non-module
        self._space_ok = False  # some finished trial got past the build
        self._objective_missing = 0  # finished trials that did not report the objective
        self._objective_ok = False  # some trial completed with it
        self.scheduler = scheduler
        self.reports = 0  # intermediate results handled
        self.report_seconds = 0.0  # driver time spent on them (journal, scheduler, decision), for the figures
        self.decisions: collections.Counter[str] = collections.Counter()  # STOP / PAUSE sent
        if scheduler is not None and scheduler.rungs:
            executor.decision_epochs(scheduler.rungs)

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
        ended = False
        try:
            while not self.out_of_time():
                if self.stop is not None and self.stop.requested:
                    self._stop_in_flight()
                    break
                self._fill()
                if self.store is not None:
                    self.store.maybe_snapshot(self)  # asks and tells so far are all journaled: a consistent cut
                if self.in_flight == 0 and self.finished >= self.budget:
                    break  # (promotions of paused trials go on past the budget until none is due)
                if self.in_flight == 0 and self.executor.free_slots() > 0:  # (none free: workers restart)
                    raise RuntimeError(
                        f"strategy {self.strategy.name!r} proposed nothing with no trial running "
                        f"({self.finished}/{self.budget} finished): the search cannot go on"
                    )
                self._handle(self.executor.poll(timeout=self.poll_timeout))
            ended = True
        finally:
            if self.store is not None and ended:
                from nas.monitor.status import end_state

                self.store.on_end(self, end_state(self))
            elif self.store is not None:  # an error: no snapshot (the strategy may be mid-batch), say so
                with contextlib.suppress(Exception):
                    self.store.maybe_status(self, "failed", force=True)
            for cb in self.callbacks:
                cb.on_end(self)
        return self.results()

    def _fill(self) -> None:
        while self.executor.free_slots() > 0:
            trial = self._next_trial()
            if trial is None:
                return
            record = self.records.get(trial.trial_id)
            if record is None:
                self._add(TrialRecord(trial, TrialState.QUEUED, submitted_at=self.clock()))
            elif trial.checkpoint_from == trial.trial_id and record.state is not TrialState.QUEUED:
                self._move(record, TrialState.QUEUED)  # a promotion continues it from its checkpoint
                record.trial, record.runs = trial, record.runs + 1
            elif record.state is not TrialState.PENDING:
                raise RuntimeError(f"strategy {self.strategy.name!r} reused trial id {trial.trial_id}")
            else:
                self._move(record, TrialState.QUEUED)
            if self.scheduler is not None:
                self.scheduler.on_start(trial.trial_id)
            if self.store is not None:
                self.store.on_submit(trial)  # journaled before it runs (write-ahead)
            elif self.journal is not None:
                self.journal.write_submit(trial)
            self.executor.submit(trial)
            for cb in self.callbacks:
                cb.on_submit(self, trial)

    def _next_trial(self) -> Trial | None:
        """A trial to submit: one re-queued after a crash, a paused trial the scheduler promotes, or the
        strategy's next proposal while the budget allows."""
        if self.requeue:
            return self.requeue.popleft()
        if self.scheduler is not None and self.scheduler.pauses:
            promotion = self.scheduler.promote()
            if promotion is not None:
                return self._continuation(promotion.trial_id, promotion.until - promotion.epoch)
        if self.finished + self.in_flight >= self.budget:
            return None
        t0 = time.perf_counter()
        trial = self.strategy.ask()
        self.strategy_seconds += time.perf_counter() - t0
        if trial is not None and self.scheduler is not None and self.scheduler.pauses and not trial.save_checkpoint:
            trial = dataclasses.replace(trial, save_checkpoint=True)  # it may pause: its checkpoint is needed
        return trial

    def _continuation(self, trial_id: int, epochs: int) -> Trial:
        trial = self.records[trial_id].trial
        return dataclasses.replace(trial, epochs=epochs, checkpoint_from=trial_id, save_checkpoint=True)

    def _handle(self, events: Sequence[Event]) -> None:
        """Apply the executor's events in order: ``started`` moves a trial from QUEUED to RUNNING,
        ``requeued`` back, ``finished`` ends it; callbacks hear of every event."""
        batch: list[tuple[Trial, Result]] = []  # results that arrive together share one fsync
        for event in events:
            if event.kind is EventKind.FINISHED:
                batch.append((event.trial, event.result))  # type: ignore[arg-type]
                continue
            self._finish_batch(batch)
            batch = []
            record = self.records.get(event.trial.trial_id)
            if record is None or record.state in (TrialState.COMPLETE, TrialState.FAILED):
                continue  # an event of a trial this loop does not hold (or no longer runs): nothing to count
            if event.kind is EventKind.REPORT:
                if record.state is TrialState.QUEUED:  # its start and first report came together
                    self._move(record, TrialState.RUNNING)
                self._report(record, event)
            elif event.kind is EventKind.STARTED and record.state is not TrialState.RUNNING:
                self._move(record, TrialState.RUNNING)
                record.started_at = event.time
            elif event.kind is EventKind.REQUEUED and record.state is TrialState.RUNNING:
                self._move(record, TrialState.QUEUED)  # its worker died: it waits to run again
            for cb in self.callbacks:
                cb.on_event(self, event)
        self._finish_batch(batch)
        if self.journal is not None and self.reports:
            self.journal.flush()  # reports reach the OS at once; the next result's fsync makes them durable

    def _report(self, record: TrialRecord, event: Event) -> None:
        """Journal an intermediate result, then let the scheduler (and the strategy) decide; a STOP or PAUSE
        goes to the executor at once."""
        t0 = time.perf_counter()
        trial, epoch = record.trial, int(event.epoch or 0)
        record.epoch = max(record.epoch, epoch)
        self.reports += 1
        if self.store is not None or self.journal is not None:
            report = Result(trial.trial_id, TrialState.RUNNING, score=event.score,
                            metrics={**event.metrics, "epoch": epoch}, epoch=epoch, end_time=event.time,
                            worker=event.worker)
            if self.store is not None:
                self.store.on_report(trial, report)
            else:
                self.journal.write_report(trial, report)  # type: ignore[union-attr]
        decision = Decision.CONTINUE
        if self.scheduler is not None and event.score is not None:
            decision = self.scheduler.on_report(trial.trial_id, epoch, event.score)
        if decision is not Decision.CONTINUE:
            self.decisions[decision.value] += 1
            record.decided = (decision.value, epoch)
            self.executor.decide(trial.trial_id, decision)
        self.report_seconds += time.perf_counter() - t0

    def _finish(self, trial: Trial, result: Result) -> None:
        self._finish_batch([(trial, result)])

    def _finish_batch(self, events: Sequence[tuple[Trial, Result]]) -> None:
        """Record a batch of results, journal them with one fsync, then tell the strategy one by one."""
        if not events:
            return
        batch = []
        for trial, result in events:
            if result.state is TrialState.COMPLETE and (result.score is None or not math.isfinite(result.score)):
                result = dataclasses.replace(result, state=TrialState.FAILED, reason=FailureKind.NAN.value,
                                             error=f"non-finite score {result.score!r}")
            if result.ok and result.scores is None:
                result.scores = [result.score]  # type: ignore[list-item]
            record = self.records[trial.trial_id]
            if record.runs > 1 and record.result is not None and record.result.history:
                result.history = [*record.result.history, *result.history]  # the whole learning curve
            self._move(record, result.state)
            record.result = result
            record.epoch = max(record.epoch, result.epoch)
            if result.start_time is not None and result.end_time is not None:
                self.busy_seconds += result.end_time - result.start_time
            if result.ok and (trial.save_checkpoint or result.reason == FailureKind.PAUSED.value):
                self._keep_checkpoint(trial.trial_id)  # before the journal: a journaled trial has its checkpoint
            batch.append((trial, result))
        if self.store is not None:
            self.store.on_results(batch)  # on disk before anyone else hears of them
        elif self.journal is not None:
            self.journal.write_results(batch)
        self._journaled += len(batch)
        for trial, result in batch:
            self._tell(self.records[trial.trial_id], trial, result)
            if result.ok and (self.best is None or result.score > self.best[1].score):  # type: ignore[operator]
                self.best = (trial, result)
                self.executor.keep_above = result.score  # type: ignore[attr-defined]
                if self.store is not None:
                    self.store.on_best(trial, result, self.executor.checkpoint(trial.trial_id))
            for cb in self.callbacks:
                cb.on_result(self, trial, result)
            self._check_space(result)
            self._check_objective(result)

    def _tell(self, record: TrialRecord, trial: Trial, result: Result) -> None:
        """The strategy hears of a trial once, when it first ends (finished, stopped or paused); a promoted
        trial's later result goes to its ``update``. The scheduler hears of every end."""
        t0 = time.perf_counter()
        if record.runs == 1:
            self.strategy.tell(trial, result)
        elif result.ok:
            self.strategy.update(trial, result)
        self.strategy_seconds += time.perf_counter() - t0
        if self.scheduler is not None:
            if result.ok:
                self.scheduler.on_result(trial.trial_id, result.epoch, result.score)
            else:
                self.scheduler.on_failed(trial.trial_id)

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

    def _check_objective(self, result: Result) -> None:
        """A run whose objective none of its first ``broken_space_trials`` finished trials reported (and none
        completed) is misconfigured: it stops with the first such trial's one-line error."""
        if self._objective_ok or self.broken_space_trials is None:
            return
        if result.reason != FailureKind.OBJECTIVE_MISSING.value:
            self._objective_ok = result.ok or self._objective_ok
            return
        self._objective_missing += 1
        if self._objective_missing >= self.broken_space_trials:
            raise ValueError(f"none of the first {self._objective_missing} trials reported the objective, so the "
                             f"search stops: {(result.error or '').splitlines()[0]}")

    def _stop_in_flight(self) -> None:
        """A requested stop: await the running trials ("wait"), or cancel them ("cancel") and leave
        them PENDING and unfinished in the journal (a resume re-runs them)."""
        self.interrupted = True
        if self.stop is not None and self.stop.mode == "wait":
            while self.in_flight:
                self._handle(self.executor.poll(timeout=self.poll_timeout))
        for record in self.records.values():
            if record.state in (TrialState.QUEUED, TrialState.RUNNING):
                self.executor.stop(record.trial.trial_id)
                self._move(record, TrialState.PENDING)

    # -- crash safety --------------------------------------------------------------------------
    def restore(self, restored: Restored) -> None:
        """Continue a crashed or stopped run from its store's :class:`nas.run.store.Restored`: the strategy
        is loaded from the last snapshot and replays the journal after it (each submission asked again, and
        checked to be the same trial; each result told), finished trials become records, and trials
        submitted but never finished are re-queued under their own ids, to run before any new ask."""
        from nas.engine.replay import replay
        from nas.run.journal import bulk_load

        with bulk_load(freeze=True):
            replay(self, restored)

    def _keep_checkpoint(self, trial_id: int) -> None:
        """Keep a finished trial's checkpoint (one that later trials may start from, as PBT's) in the run
        directory, so it outlives the driver; the oldest beyond the executor's bound go."""
        if self.store is None:
            return
        data = self.executor.checkpoint(trial_id)
        if data is not None:
            self.store.keep_checkpoint(trial_id, data, self.executor.checkpoint_keep)

    def summary(self) -> dict[str, Any]:
        wall = self.elapsed
        return {
            "finished": self.finished, "failed": self.count(TrialState.FAILED),
            "best_score": self.best_score, "wall_seconds": wall,
            "utilization": self.busy_seconds / (max(self.executor.slots, 1) * wall) if wall > 0 else 0.0,
            "strategy_seconds": self.strategy_seconds, "resumed": self.resumed, "interrupted": self.interrupted,
            "reports": self.reports, "report_seconds": self.report_seconds, "decisions": dict(self.decisions),
        }
