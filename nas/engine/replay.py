"""Resume: a search loop rebuilt from its run directory's last snapshot and the journal after it.

The strategy (and the scheduler) are loaded from the snapshot, then every record after it is replayed into
them in order: each first submission asked again and checked to be the same trial, each report given to the
scheduler, each promotion checked to be the one the scheduler makes again, each result told. Finished
trials become records; trials submitted (or continued) and never finished are re-queued under their own ids;
kept checkpoints go back to the executor. The loop's own ``restore`` calls :func:`replay`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nas.core.space import InvalidSpace
from nas.core.types import Result, Trial

if TYPE_CHECKING:
    from nas.engine.loop import SearchLoop
    from nas.run.store import Restored


def replay(loop: SearchLoop, restored: Restored) -> None:
    """Restore ``loop`` from ``restored`` (see :meth:`nas.engine.loop.SearchLoop.restore`)."""
    snap = restored.snapshot
    start = 0
    if snap is not None:
        loop.strategy.load_state_dict(snap["state"])
        if loop.scheduler is not None and snap.get("scheduler") is not None:
            loop.scheduler.load_state_dict(snap["scheduler"])
        start = int(snap["records"])
    submitted: dict[int, Trial] = {}  # submitted (or continued), not finished since (in submission order)
    for i, rec in enumerate(restored.records):
        tid, after = rec.trial.trial_id, i >= start  # after the snapshot: replay it into the strategy
        if rec.kind == "submit":
            if tid in loop.records and rec.trial.checkpoint_from == tid:  # a promotion continued it
                submitted[tid] = rec.trial
                if after:
                    _replay_promotion(loop, tid, rec.line)
                continue
            first = tid not in submitted and tid not in loop.records
            if first:
                submitted[tid] = rec.trial
            if first and after:  # asked after the snapshot: ask again, so the strategy knows it
                asked = loop.strategy.ask()
                if asked is None or asked.trial_id != tid:
                    raise ValueError(
                        f"cannot resume: replaying the journal (line {rec.line}), strategy "
                        f"{loop.strategy.name!r} asked {None if asked is None else asked.trial_id} where the "
                        f"journal has trial {tid}: it does not replay deterministically")
                if loop.scheduler is not None:
                    loop.scheduler.on_start(tid)
        elif rec.kind == "report" and rec.result is not None:
            record = loop.records.get(tid)
            if record is not None:
                record.epoch = max(record.epoch, rec.result.epoch)
            if after and loop.scheduler is not None and rec.result.score is not None:
                loop.scheduler.on_report(tid, rec.result.epoch, rec.result.score)
        elif rec.kind == "result" and rec.result is not None:
            submitted.pop(tid, None)
            _restore_result(loop, rec.trial, rec.result, after)
    loop.requeue.extend(submitted.values())
    if loop.store is not None:
        for trial_id, data in loop.store.kept_checkpoints():
            record = loop.records.get(trial_id)
            if record is not None and record.result is not None and record.result.ok:
                loop.executor.restore_checkpoint(trial_id, data)
                loop.store.note_kept(trial_id)
    loop._journaled = loop.resumed = loop.finished
    if loop.best is not None:
        loop.executor.keep_above = loop.best[1].score  # type: ignore[attr-defined]

def _replay_promotion(loop: SearchLoop, trial_id: int, line: int) -> None:
    """A promotion the journal holds: the scheduler, replayed to this point, must promote the same trial."""
    promotion = loop.scheduler.promote() if loop.scheduler is not None else None
    if promotion is None or promotion.trial_id != trial_id:
        raise ValueError(f"cannot resume: replaying the journal (line {line}), the scheduler promoted "
                         f"{None if promotion is None else promotion.trial_id} where the journal continues "
                         f"trial {trial_id}: it does not replay deterministically")
    loop.records[trial_id].runs += 1

def _restore_result(loop: SearchLoop, trial: Trial, result: Result, after: bool) -> None:
    """A journaled result: a record (or a continued trial's newer result), told if after the snapshot."""
    from nas.engine.loop import TrialRecord

    record = loop.records.get(trial.trial_id)
    if record is None:
        record = TrialRecord(trial, result.state, result)
        loop._add(record)
    else:  # a continued trial's newer result
        loop._move(record, result.state)
        record.result = result
    record.epoch = max(record.epoch, result.epoch)
    if after:  # journaled after the snapshot: tell it now
        loop._tell(record, trial, result)
    if not result.ok and (result.error or "").startswith(InvalidSpace.__name__ + ":"):
        loop._build_failures += 1
    else:
        loop._space_ok = True
    if result.ok and (loop.best is None or result.score > loop.best[1].score):  # type: ignore[operator]
        loop.best = (record.trial, result)


__all__ = ["replay"]
