"""The search loop: the only place that knows about concurrency.

Whenever the executor has a free slot the loop asks the strategy for a trial and submits it; then it
waits for the first completion, journals it, tells the strategy, and fills the slot again. There is no
generation barrier: a fast trial's slot is refilled while slow ones still run.

The loop hands out values, never itself: :meth:`SearchLoop.status` (a frozen :class:`LoopStatus`: counts,
best, clock, utilization) for the callbacks and the run directory's ``status.json``, and
:meth:`SearchLoop.snapshot_state` (a :class:`SnapshotState`) for snapshots. With a ``store`` (the run
directory's owner, :class:`nas.run.store.RunStore`) the loop is crash-safe and writes no file itself: each
submission is journaled, each batch of results is journaled with one fsync before the strategy is told, and
the store snapshots the strategy every K results or T seconds, so a run can be resumed after any crash
(:meth:`SearchLoop.restore`). With ``stop`` (a :class:`nas.engine.stop.StopSignal`) it stops gracefully when
asked: no new trials, the running ones cancelled or awaited.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from nas.core.space import InvalidSpace
from nas.core.strategy import Strategy, check_asked
from nas.core.types import (
    Decision,
    FailureKind,
    InvalidArchitecture,
    Outcome,
    Result,
    SupernetChanged,
    Trial,
    TrialState,
    python_numbers,
)
from nas.engine.book import FailureWatch, TrialBook, TrialRecord, failed_continuation
from nas.engine.interfaces import Callback, LoopStatus, RunWriter, SnapshotState
from nas.engine.protocol import Event, EventKind, Executor, KeepRule

if TYPE_CHECKING:
    from nas.core.scheduler import Scheduler
    from nas.engine.replay import Restored
    from nas.engine.stop import StopSignal

log = logging.getLogger(__name__)


def _victim(strategy: Strategy, scheduler: Scheduler | None) -> Callable[[Sequence[int]], int | None]:
    """Which kept checkpoint goes at the executor's bound: a pausing scheduler's choice (the paused trial least
    likely to be continued), unless the strategy will start a trial from it (evolution's members with ``inherit``:
    ASHA dropped them first, as ended trials, and their children failed as CHECKPOINT_MISSING, 68 of 600), then the
    strategy's own; without such a scheduler, the strategy's."""
    if scheduler is None:
        return strategy.expendable

    def victim(kept: Sequence[int]) -> int | None:
        pick = scheduler.expendable(kept)
        pick = kept[0] if pick is None and kept else pick  # (None: the oldest)
        if pick is not None and strategy.checkpoints_needed() and strategy.expendable([pick]) != pick:
            return strategy.expendable(kept)
        return pick

    return victim


class SearchLoop:
    """Runs ``strategy`` on ``executor`` until ``budget`` trials have finished (COMPLETE or FAILED), or
    ``time_budget`` seconds have passed on the executor's clock (trials still running then are left
    unfinished and unjournaled), or ``stop`` is requested (then ``interrupted`` is True; trials that
    were cancelled are left PENDING and unjournaled, and a resume re-runs them).

    A space whose ``build`` fails for some architectures makes FAILED trials (data, like a NaN loss);
    one whose build failed for each of the first ``broken_space_trials`` finished trials (and none got
    past it) is broken, and the search stops with :class:`nas.core.space.InvalidSpace` and the first error.
    A trial that found the supernet it evaluates with changed (SUPERNET_CHANGED) stops it at once with
    :class:`nas.core.types.SupernetChanged`: every later trial would fail alike."""

    def __init__(
        self,
        strategy: Strategy,
        executor: Executor,
        *,
        budget: int | None = None,
        time_budget: float | None = None,
        store: RunWriter | None = None,
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
        self.budget = budget
        self.time_budget = time_budget
        self.store = store
        self.callbacks = list(callbacks)
        self.poll_timeout = poll_timeout
        self.book = TrialBook()
        self.started_at = self.clock()
        self.strategy_seconds = 0.0  # time spent inside ask/tell, for the overhead figures
        self.busy_seconds = 0.0  # summed trial durations, for worker utilization
        self.stop = stop
        self.interrupted = False
        self.resumed = 0  # trials loaded from the journal by restore()
        self.requeue: collections.deque[Trial] = collections.deque()  # in flight at a crash: run first
        self.space_watch = FailureWatch(FailureKind.INVALID_SPACE, broken_space_trials, clears=lambda r: True)
        self.objective_watch = FailureWatch(FailureKind.OBJECTIVE_MISSING, broken_space_trials,
                                            clears=lambda r: r.ok)
        self.supernet_watch = FailureWatch(FailureKind.SUPERNET_CHANGED, 1, clears=lambda r: False)  # (the first)
        self.scheduler = scheduler
        kept = executor.checkpoints  # (the checkpoints trials start from: the owner of each says which may go)
        kept.victim = _victim(strategy, scheduler if scheduler is not None and scheduler.pauses else None)
        if needed := strategy.checkpoints_needed():  # (and those of trials in flight, prefetched ones too)
            kept.keep = max(kept.keep, needed + 2 * executor.slots + 1)
        self.wait_epochs = frozenset(scheduler.rungs) if scheduler is not None else frozenset()
        self.reports = 0  # intermediate results handled
        self.report_seconds = 0.0  # driver time spent on them (journal, scheduler, decision), for the figures
        self.decisions: collections.Counter[str] = collections.Counter()  # STOP / PAUSE sent
        self.warned_restart = False  # (a continuation that reported its epochs from 1 again: said once)
        self.end_state = "running"

    def clock(self) -> float:
        """Seconds on the executor's clock: simulated time for a simulated executor, else wall time."""
        now = self.executor.now()
        return time.time() if now is None else now

    @property
    def elapsed(self) -> float:
        return self.clock() - self.started_at

    def out_of_time(self) -> bool:
        return self.time_budget is not None and self.elapsed >= self.time_budget

    def out_of_budget(self) -> bool:
        return self.budget is not None and self.book.finished >= self.budget

    # -- what the loop hands out -----------------------------------------------------------------
    @property
    def finished(self) -> int:
        return self.book.finished

    @property
    def best(self) -> tuple[Trial, Result] | None:
        return self.book.best

    def results(self) -> list[tuple[Trial, Result]]:
        return self.book.results()

    def status(self, state: str | None = None) -> LoopStatus:
        book, best = self.book, self.book.best
        return LoopStatus(
            state=state or self.end_state, strategy=self.strategy.name, finished=book.finished,
            complete=book.count(TrialState.COMPLETE), failed=book.count(TrialState.FAILED),
            running=book.count(TrialState.RUNNING), queued=book.count(TrialState.QUEUED),
            workers=self.executor.slots, budget=self.budget, time_budget=self.time_budget, elapsed=self.elapsed,
            busy_seconds=self.busy_seconds, best_score=book.best_score, best_trial=best[0].trial_id if best else None,
            population=self.strategy.population_size(), strategy_seconds=self.strategy_seconds, reports=self.reports,
            report_seconds=self.report_seconds, decisions=dict(self.decisions), resumed=self.resumed)

    def snapshot_state(self) -> SnapshotState:
        return SnapshotState(self.strategy.state_dict(),
                             None if self.scheduler is None else self.scheduler.state_dict(), self.strategy_seconds)

    def summary(self) -> dict[str, Any]:
        """The run's figures at the end (``df.attrs["summary"]``)."""
        st = self.status()
        return {"finished": st.finished, "failed": st.failed, "best_score": st.best_score,
                "wall_seconds": st.elapsed, "utilization": st.utilization or 0.0,
                "strategy_seconds": st.strategy_seconds, "resumed": st.resumed, "interrupted": self.interrupted,
                "reports": st.reports, "report_seconds": st.report_seconds, "decisions": dict(st.decisions)}

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> list[tuple[Trial, Result]]:
        if self.stop is not None:  # (from now on a stop is heard: before, a signal aborts the start)
            self.stop.running = True
        status = self.status("running")
        try:
            if self.store is not None:
                self.store.write_status(status)
            for cb in self.callbacks:  # (one that raises ends the search as failed: status.json says so)
                cb.on_start(status)
            while not self.out_of_time():
                if self.stop is not None and self.stop.requested:
                    self._stop_in_flight()
                    break
                if not self._round():
                    break
                if self.store is not None and self.store.status_due():
                    self.store.write_status(self.status("running"))
            self.end_state = ("interrupted" if self.interrupted else
                              "finished" if self.out_of_budget() or self.out_of_time() else "stopped")
            if self.resumed and self.finished == self.resumed and self.out_of_time():  # (it ran nothing, said nothing)
                log.warning("the run's time budget (%g s) is spent: nothing more finishes unless a resume raises it "
                            "(--time-budget)", self.time_budget)
            if self.store is not None:
                self.store.finish(self.status(), self.snapshot_state())
        except BaseException as e:  # (a KeyboardInterrupt: a second Ctrl-C, or one in Python with no stop signal)
            self.end_state = "interrupted" if isinstance(e, KeyboardInterrupt) else "failed"
            if self.store is not None:  # no snapshot (the strategy may be mid-batch); say so
                with contextlib.suppress(Exception):
                    self.store.finish(self.status(), None)
            raise
        finally:
            status = self.status()
            for cb in self.callbacks:
                cb.on_end(status)
        return self.results()

    def _round(self) -> bool:
        """Fill the free slots, snapshot when due, handle what the executor has; False where the search is done."""
        self._fill()
        if self.store is not None and self.store.snapshot_due(self.strategy_seconds):
            self.store.snapshot(self.snapshot_state())  # asks and tells so far all journaled: a consistent cut
        if self.book.in_flight == 0 and self.out_of_budget():
            return False  # (promotions of paused trials go on past the budget until none is due)
        if self.book.in_flight == 0 and self.executor.free_slots() > 0:  # (none free: workers restart)
            raise RuntimeError(
                f"strategy {self.strategy.name!r} proposed nothing with no trial running "
                f"({self.finished}/{self.budget} finished): the search cannot go on"
            )
        self._handle(self._by_deadline(self.executor.poll(timeout=self.poll_timeout)))
        return True

    def fast_forward(self, caught_up: Callable[[], bool]) -> bool:
        """Run the search, unheard (no callback is told), until ``caught_up()`` between two rounds; False where it
        ended first. A resume that runs a deterministic search again from its start against its journal
        (:mod:`nas.run.rerun`) catches up so, then :meth:`run` goes on as the uninterrupted run did."""
        callbacks, self.callbacks = self.callbacks, []
        try:
            while not caught_up():
                if self.out_of_time() or not self._round():
                    return False
        finally:
            self.callbacks = callbacks
        self.resumed = self.finished
        return True

    def _by_deadline(self, events: list[Event]) -> list[Event]:
        """``events`` up to the time budget's end. A simulated clock's poll moves to its next event, which may lie
        past it (a trial that ended at 3,011 s counted in a 3,000 s budget): what happened after the end is left
        unfinished, as a trial still running then is."""
        if self.time_budget is None or self.executor.now() is None:
            return events
        deadline = self.started_at + self.time_budget
        return [e for e in events if e.time is None or e.time <= deadline]

    def _fill(self) -> None:
        while self.executor.free_slots() > 0:
            trial = self._next_trial()
            if trial is None:
                return
            record = self.book.get(trial.trial_id)
            if record is None:
                self.book.add(trial, TrialState.QUEUED, submitted_at=self.clock())
            elif trial.checkpoint_from == trial.trial_id and record.state is not TrialState.QUEUED:
                self.book.move(record, TrialState.QUEUED)  # a promotion continues it from its checkpoint
                record.trial, record.runs = trial, record.runs + 1
            elif record.state is not TrialState.PENDING:
                raise RuntimeError(f"strategy {self.strategy.name!r} reused trial id {trial.trial_id}")
            else:
                self.book.move(record, TrialState.QUEUED)
            if self.scheduler is not None:
                self.scheduler.on_start(trial.trial_id)
            if self.store is not None:
                self.store.on_submit(trial)  # journaled before it runs (write-ahead)
            self.executor.submit(trial, keep=KeepRule(trial.save_checkpoint, self.book.best_score),
                                 wait_epochs=self.wait_epochs)
            for cb, status in self._callbacks():
                cb.on_submit(status, trial)

    def _next_trial(self) -> Trial | None:
        """A trial to submit: one re-queued after a crash, a paused trial the scheduler promotes, or the
        strategy's next proposal while the budget allows."""
        if self.requeue:
            return self.requeue.popleft()
        if self.scheduler is not None and self.scheduler.pauses:
            promotion = self.scheduler.promote()
            if promotion is not None:
                return self.continuation(promotion.trial_id, promotion.until - promotion.epoch)
        if self.budget is not None and self.book.finished + self.book.in_flight >= self.budget:
            return None
        t0 = time.perf_counter()
        trial = self.strategy.ask()
        self.strategy_seconds += time.perf_counter() - t0
        if trial is not None:
            check_asked(trial, self.strategy.name)
            trial = self._in_space(trial)
        if trial is not None and self.scheduler is not None and self.scheduler.pauses and not trial.save_checkpoint:
            trial = dataclasses.replace(trial, save_checkpoint=True)  # it may pause: its checkpoint is needed
        return trial

    def _in_space(self, trial: Trial) -> Trial:
        """``trial``, its architecture's numpy numbers as Python's (equal to the options, they were journaled as text,
        "32", which no option is: the run could not be resumed); a proposal outside the strategy's space stops the
        search (InvalidSpace) before it is journaled: a journal holding one could never be resumed, and every later
        proposal of a space whose ``sample`` or ``mutate`` leaves its ``dims()`` may do the same."""
        plain = {k: python_numbers(v) for k, v in trial.arch.items()}
        if any(plain[k] is not v for k, v in trial.arch.items()):
            trial = dataclasses.replace(trial, arch=plain)
        space = getattr(self.strategy, "space", None)
        if space is None:
            return trial
        try:
            space.validate(trial.arch)
        except InvalidArchitecture as e:
            raise InvalidSpace(f"strategy {self.strategy.name!r} proposed trial {trial.trial_id} outside its space "
                               f"{type(space).__name__} ({e}): the space's sample() or mutate(), or the strategy, "
                               "makes architectures its dims() does not allow") from None
        return trial

    def continuation(self, trial_id: int, epochs: int) -> Trial:
        """A promoted trial: ``epochs`` more of it, from its own kept checkpoint, under its own id."""
        trial = self.book.records[trial_id].trial
        return dataclasses.replace(trial, epochs=epochs, checkpoint_from=trial_id, save_checkpoint=True)

    def _callbacks(self) -> list[tuple[Callback, LoopStatus]]:
        """Each callback with the status of this moment (made once, and only when there are callbacks)."""
        if not self.callbacks:
            return []
        status = self.status("running")
        return [(cb, status) for cb in self.callbacks]

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
            record = self.book.get(event.trial.trial_id)
            if record is None or record.state in (TrialState.COMPLETE, TrialState.FAILED, TrialState.PENDING):
                continue  # an event of a trial this loop does not hold (or no longer runs): nothing to count
            if event.kind is EventKind.REPORT:
                if record.state is TrialState.QUEUED:  # its start and first report came together
                    self.book.move(record, TrialState.RUNNING)
                self._report(record, event)
            elif event.kind is EventKind.STARTED and record.state is not TrialState.RUNNING:
                self.book.move(record, TrialState.RUNNING)
                record.started_at = event.time
            elif event.kind is EventKind.REQUEUED and record.state is TrialState.RUNNING:
                self.book.move(record, TrialState.QUEUED)  # its worker died: it waits to run again
                record.curve = None  # (and reports its epochs again)
            for cb, status in self._callbacks():
                cb.on_event(status, event)
        self._finish_batch(batch)
        if self.store is not None and self.reports:
            self.store.flush()  # reports reach the OS at once; the next result's fsync makes them durable

    def _report(self, record: TrialRecord, event: Event) -> None:
        """Journal an intermediate result, then let the scheduler decide; a STOP or PAUSE goes to the executor
        at once."""
        t0 = time.perf_counter()
        trial, report = record.trial, event.report
        assert report is not None
        before = record.result.epoch if record.runs > 1 and record.result is not None else 0
        if trial.checkpoint_from is not None and trial.checkpoint_from != trial.trial_id and before == 0:
            source = self.book.get(trial.checkpoint_from)  # (PBT's segments: new trials from an older one's)
            before = source.result.epoch if source is not None and source.result is not None else 0
        if report.epoch <= before and not self.warned_restart:  # (silent: promotions retrained and never rose)
            self.warned_restart = True
            log.warning("trial %d was continued from epoch %d (a promotion or an exploit) and reported epoch %d: a "
                        "training function goes on from its checkpoint (ctx.checkpoint.load(): its 'epoch') and "
                        "counts its epochs on from there, or each continuation trains from scratch and no trial "
                        "reaches the scheduler's higher rungs", trial.trial_id, before, report.epoch)
        record.epoch = max(record.epoch, report.epoch)
        record.curve = [*(record.curve or ()), {"epoch": report.epoch, **report.metrics}]
        self.reports += 1
        if self.store is not None:
            self.store.on_report(trial, report)
        if self.scheduler is not None and report.score is not None:
            decision = self.scheduler.on_report(trial.trial_id, report.epoch, report.score)
            if decision is not Decision.CONTINUE:
                self.decisions[decision.value] += 1
                record.decided, record.decided_at = decision, report.epoch
                self.executor.stop(trial.trial_id, Outcome.PAUSED if decision is Decision.PAUSE else Outcome.STOPPED)
        self.report_seconds += time.perf_counter() - t0

    def _finish_batch(self, events: Sequence[tuple[Trial, Result]]) -> None:
        """Record a batch of results, journal them with one fsync, then tell the strategy one by one."""
        if not events:
            return
        batch = []
        for trial, result in events:
            record = self.book.records[trial.trial_id]
            curve, record.curve = record.curve, None  # (this run's reports: it ended)
            if result.outcome is Outcome.CANCELLED:  # no result: left PENDING, unjournaled (a resume runs it)
                self.book.move(record, TrialState.PENDING)
                continue
            if result.ok and (result.score is None or not math.isfinite(result.score)):
                result = dataclasses.replace(result, outcome=Outcome.FAILED, failure=FailureKind.NAN,
                                             error=f"non-finite score {result.score!r}")
            if result.ok and result.scores is None:
                result.scores = [result.score]  # type: ignore[list-item]
            if not result.ok and not result.history and curve:  # (a timeout, a lost worker, an error: the learning
                result = dataclasses.replace(result, history=curve,  # curve it reported, which the result lacked)
                                             epoch=max(result.epoch, curve[-1]["epoch"]))
            if record.runs > 1 and record.result is not None and record.result.history:
                result.history = [*record.result.history, *result.history]  # the whole learning curve
            if result.start_time is not None and result.end_time is not None:
                self.busy_seconds += result.end_time - result.start_time
            if result.ok and (trial.save_checkpoint or result.outcome is Outcome.PAUSED):
                self._keep_checkpoint(trial.trial_id)  # before the journal: a journaled trial has its checkpoint
            seen = result
            if record.runs > 1 and not result.ok and record.result is not None and record.result.ok:
                result = failed_continuation(record.result, result)  # (what it measured before stays its result)
            batch.append((trial, result, record, seen))
        if self.store is not None and batch:
            self.store.on_results([(t, r) for t, r, _, _ in batch])  # on disk before anyone else hears of them
        for trial, result, record, seen in batch:
            best = self.book.finish(record, result)
            self.deliver(record, trial, result)
            if best and self.store is not None:
                self.store.on_best(trial, result, self.executor.checkpoints.get(trial.trial_id))
            for cb, status in self._callbacks():
                cb.on_result(status, trial, result)
            self._check(seen)

    def deliver(self, record: TrialRecord, trial: Trial, result: Result) -> None:
        """Tell the strategy of a trial's end once, when it first ends (finished, stopped or paused); a promoted
        trial's later result goes to its ``update``. The scheduler hears of every end."""
        t0 = time.perf_counter()
        if record.runs == 1:
            self.strategy.tell(trial, result)
        elif result.ok:
            self.strategy.update(trial, result)
        self.strategy_seconds += time.perf_counter() - t0
        if self.scheduler is not None:
            if result.ok:
                self.scheduler.on_result(trial.trial_id, result.epoch, result.score)  # type: ignore[arg-type]
            else:
                self.scheduler.on_failed(trial.trial_id)

    def _check(self, result: Result) -> None:
        first = self.space_watch.see(result)
        if first is not None:
            raise InvalidSpace(
                f"the space's model could not be built or run for each of the first {self.space_watch.count} trials, "
                f"so the search stops (fix the space, then resume): {first.removeprefix('InvalidSpace: ')}")
        first = self.objective_watch.see(result)
        if first is not None:
            raise ValueError(f"none of the first {self.objective_watch.count} trials reported the objective, so "
                             f"the search stops: {first}")
        first = self.supernet_watch.see(result)
        if first is not None:
            raise SupernetChanged(
                f"the supernet changed under this search, so it stops after {self.finished} finished trials (kept): "
                f"{first.removeprefix('SUPERNET_CHANGED: ')}; search the supernet as it is now into a new --run-dir "
                f"(a resume of this run is refused while the weights are not those it searched)")

    def _stop_in_flight(self) -> None:
        """A requested stop: await the running trials ("wait"), or cancel them ("cancel") and leave
        them PENDING and unfinished in the journal (a resume re-runs them)."""
        self.interrupted = True
        if self.stop is not None and self.stop.mode == "wait":
            while self.book.in_flight:
                self._handle(self._by_deadline(self.executor.poll(timeout=self.poll_timeout)))
        for record in self.book.in_states(TrialState.QUEUED, TrialState.RUNNING):
            self.executor.stop(record.trial.trial_id, Outcome.CANCELLED)
            self.book.move(record, TrialState.PENDING)

    def _keep_checkpoint(self, trial_id: int) -> None:
        """Keep a finished trial's checkpoint (one that later trials may start from, as PBT's) in the run
        directory, so it outlives the driver; those the executor dropped go."""
        if self.store is None:
            return
        data = self.executor.checkpoints.get(trial_id)
        if data is not None:
            self.store.keep_checkpoint(trial_id, data, self.executor.checkpoints)

    # -- crash safety --------------------------------------------------------------------------
    def restore(self, restored: Restored) -> None:
        """Continue a crashed or stopped run from its store's :class:`nas.engine.replay.Restored`: the strategy
        is loaded from the last snapshot and replays the journal after it (each submission asked again, and
        checked to be the same trial; each result told), finished trials become records, and trials
        submitted but never finished are re-queued under their own ids, to run before any new ask
        (:mod:`nas.engine.replay`)."""
        from nas.engine.replay import replay

        replay(self, restored)
        self.resumed = self.finished


__all__ = ["SearchLoop"]
