"""Resume: a search loop rebuilt from its run directory's last snapshot and the journal after it.

A run directory can be continued after any crash of the driver (SIGKILL included) because of one ordering,
kept by :class:`nas.engine.loop.SearchLoop` and the run directory's owner (:class:`nas.run.store.RunStore`):
a submission is journaled before the trial runs; a result is journaled (and fsynced) before the strategy is
told of it; and every K results or T seconds, between rounds, the strategy's ``state_dict()`` is snapshotted
atomically with the number of journal records it covers. Resuming (``nas.search(..., run_dir=RUN,
resume=True)`` or ``nas search --resume RUN``) ends with exactly ``budget`` finished trials, each trial id
journaled once (a promoted trial once per run of it).

The strategy (and the scheduler) are loaded from the snapshot, then every record after it is replayed into
them in order: each first submission asked again and checked to be the same trial (id and architecture), each
report given to the scheduler, each promotion checked to be the one the scheduler makes again (a promotion
journaled again when an earlier resume re-queued it is the same one), each result told. Finished trials become
records of the loop's book; trials submitted (or continued) and never finished are re-queued under their own
ids; kept checkpoints go back to the executor. :meth:`nas.engine.loop.SearchLoop.restore`
calls :func:`replay`, which uses only the loop's public operations.

A replay restores what the driver knew, not what the executor held (trials in flight run again from the resume's
clock). Where the executor is deterministic and free to run (simulated), a resume runs the whole search again
instead, checked against the journal (:mod:`nas.run.rerun`), and ends as the uninterrupted run.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from nas.core.types import Report, Result, Trial, arch_key
from nas.engine.protocol import SimulatedClock

if TYPE_CHECKING:
    from nas.engine.loop import SearchLoop


class Recorded(Protocol):
    """One journal record, as :mod:`nas.run.journal` reads it: ``kind`` submit, report or result."""

    @property
    def kind(self) -> str: ...
    @property
    def trial(self) -> Trial: ...
    @property
    def result(self) -> Result | None: ...
    @property
    def report(self) -> Report | None: ...
    @property
    def line(self) -> int: ...


@dataclasses.dataclass(frozen=True)
class Restored:
    """What a resumed run starts from: its journal's records and its last snapshot (or None)."""

    records: Sequence[Recorded]
    snapshot: Mapping[str, Any] | None


def replay(loop: SearchLoop, restored: Restored) -> None:
    """Restore ``loop`` from ``restored`` (see :meth:`nas.engine.loop.SearchLoop.restore`)."""
    snap = restored.snapshot
    start = 0
    if snap is not None:
        for part, owner, state in (("strategy", loop.strategy, snap["state"]),
                                   ("scheduler", loop.scheduler, snap.get("scheduler"))):
            if owner is None or state is None:
                continue
            try:
                owner.load_state_dict(state)
            except (TypeError, KeyError, ValueError, AttributeError, IndexError) as e:  # (data a hand has edited)
                raise ValueError(f"snapshot.json: the {part}'s state does not fit {type(owner).__name__} "
                                 f"({type(e).__name__}: {e}); the snapshot is corrupt") from None
        start = int(snap["records"])
    submitted: dict[int, Trial] = {}  # submitted (or continued), not finished since (in submission order)
    for i, rec in enumerate(restored.records):
        tid, after = rec.trial.trial_id, i >= start  # after the snapshot: replay it into the strategy
        if rec.kind == "submit":
            if tid in loop.book and rec.trial.checkpoint_from == tid:  # a promotion continued it
                if tid not in submitted:  # (journaled again when a resume re-queued it: the same promotion)
                    submitted[tid] = rec.trial
                    if after:
                        _replay_promotion(loop, tid, rec.line)
                continue
            first = tid not in submitted and tid not in loop.book
            if first:
                submitted[tid] = rec.trial
            if first and after:  # asked after the snapshot: ask again, so the strategy knows it
                asked = loop.strategy.ask()
                if asked is None or asked.trial_id != tid or dict(asked.arch) != dict(rec.trial.arch):
                    what = "nothing" if asked is None else f"trial {asked.trial_id} {arch_key(asked.arch)}"
                    raise ValueError(
                        f"cannot resume: replaying the journal (line {rec.line}), strategy {loop.strategy.name!r} "
                        f"asked {what} where the journal has trial {tid} {arch_key(rec.trial.arch)}: it does not "
                        "replay deterministically")
                if loop.scheduler is not None:
                    loop.scheduler.on_start(tid)
        elif rec.kind == "report" and rec.report is not None:
            record = loop.book.get(tid)
            if record is not None:
                record.epoch = max(record.epoch, rec.report.epoch)
            if after and loop.scheduler is not None and rec.report.score is not None:
                loop.scheduler.on_report(tid, rec.report.epoch, rec.report.score)
        elif rec.kind == "result" and rec.result is not None:
            continued = submitted.pop(tid, None)
            if continued is not None and continued.checkpoint_from == tid and tid in loop.book:
                loop.book.records[tid].runs += 1  # a promotion's result (one not finished re-runs: the loop counts it)
            _restore_result(loop, rec.trial, rec.result, after)
    loop.requeue.extend(submitted.values())
    if isinstance(loop.executor, SimulatedClock):
        times = [t for rec in restored.records for t in _times(rec)]
        ended = {tid: (record.result.outcome, record.result.epoch) for tid, record in loop.book.records.items()
                 if record.result is not None}
        loop.executor.resume_at(max(times, default=0.0), ended)
        loop.busy_seconds += sum(r.end_time - r.start_time for rec in restored.records  # (the clock counts them too)
                                 if rec.kind == "result" and (r := rec.result) is not None
                                 and r.start_time is not None and r.end_time is not None)
    if loop.store is not None:
        for trial_id, data in loop.store.kept_checkpoints():
            record = loop.book.get(trial_id)
            if record is not None and record.result is not None and record.result.ok:
                loop.executor.checkpoints.put(trial_id, data)
                loop.store.note_kept(trial_id)


def _times(rec: Recorded) -> list[float]:
    """The times on the executor's clock a journal record holds (a result's start and end, a report's)."""
    r = rec.result if rec.kind == "result" else None
    times = [r.start_time, r.end_time] if r is not None else [rec.report.time] if rec.report is not None else []
    return [t for t in times if isinstance(t, int | float) and math.isfinite(t)]


def _replay_promotion(loop: SearchLoop, trial_id: int, line: int) -> None:
    """A promotion the journal holds: the scheduler, replayed to this point, must promote the same trial."""
    promotion = loop.scheduler.promote() if loop.scheduler is not None else None
    if promotion is None or promotion.trial_id != trial_id:
        raise ValueError(f"cannot resume: replaying the journal (line {line}), the scheduler promoted "
                         f"{None if promotion is None else promotion.trial_id} where the journal continues "
                         f"trial {trial_id}: it does not replay deterministically")


def _restore_result(loop: SearchLoop, trial: Trial, result: Result, after: bool) -> None:
    """A journaled result: a record (or a continued trial's newer result), told if after the snapshot."""
    record = loop.book.get(trial.trial_id)
    if record is None:
        record = loop.book.add(trial, result.state)
    loop.book.finish(record, result)
    if after:  # journaled after the snapshot: tell it now
        loop.deliver(record, trial, result)
    loop.space_watch.see(result)  # (counted, as if it had just finished; the next failure decides)


__all__ = ["Recorded", "Restored", "replay"]
