"""An exact resume of a deterministic search: the run again from its start, checked against its journal.

Replaying a journal into a strategy (:mod:`nas.engine.replay`) restores what the driver knew, not what an
executor held: a simulated executor's trials in flight at the crash start again at the resume's clock, so with
several workers the rest of the run differs from an uninterrupted one. A simulated search is deterministic and
costs no training, so its resume runs the search again from the start instead: :class:`Rerun` stands between the
loop and the run's :class:`nas.run.store.RunStore`, and while the journal has records left, each record the loop
would write is compared with the journal's next one (the same bytes, :func:`nas.run.journal.record_line`) and
written nowhere; nothing else is written either (no snapshot, no status, no best). Once every record matched it
passes every call through: the search goes on exactly as if it had never stopped. A record that differs (a journal
an earlier resume replayed, a raised budget that changed what was asked, a table that changed) is
:class:`Diverged`, raised before anything was written, and the caller resumes by replaying instead.

>>> import tempfile
>>> from pathlib import Path
>>> from nas.core.types import Outcome, Result, Trial
>>> from nas.run.store import RunStore
>>> d = Path(tempfile.mkdtemp()) / "run"
>>> store = RunStore.create(d, {"space": "toy"})
>>> t = Trial(0, {"a": 1}); store.on_submit(t); store.on_results([(t, Result(0, Outcome.COMPLETE, 1.0))])
>>> store.close(); store = RunStore.resume(d, {"space": "toy"})
>>> rerun = Rerun(store, store.restored.records)
>>> rerun.on_submit(t); rerun.caught_up
False
>>> rerun.on_results([(t, Result(0, Outcome.COMPLETE, 0.5))])
Traceback (most recent call last):
...
nas.run.rerun.Diverged: at the journal's line 2, ... a result of trial 0 that differs ... in result.score
"""

from __future__ import annotations

import json
from collections.abc import Container, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nas.core.types import Report, Result, Trial
from nas.engine.interfaces import LoopStatus, SnapshotState
from nas.run.journal import record_line
from nas.run.schema import SchemaError, read_status

if TYPE_CHECKING:
    from nas.engine.replay import Recorded, Restored
    from nas.run.store import RunStore


class Diverged(ValueError):
    """The search run again wrote a record other than the journal's: it cannot continue the journal exactly."""


class Rerun:
    """A :class:`nas.engine.interfaces.RunWriter` that checks a search run again against ``records`` (its journal,
    as :meth:`nas.run.store.RunStore.resume` read it) and then writes through ``store``."""

    restored: Restored | None = None  # (the loop is not restored: it runs again)

    def __init__(self, store: RunStore, records: Sequence[Recorded]) -> None:
        self.store, self.records, self.matched = store, records, 0

    @property
    def caught_up(self) -> bool:
        """Whether every journal record was written again, the same (from now on the store writes)."""
        return self.matched >= len(self.records)

    def _match(self, kind: str, trial: Trial, payload: Result | Report | None = None) -> bool:
        """Whether the record was in the journal (checked); False once caught up (to be written)."""
        if self.caught_up:
            return False
        rec = self.records[self.matched]
        line = record_line(kind, trial, payload)
        had = record_line(rec.kind, rec.trial, rec.result if rec.kind == "result" else rec.report)
        if line != had:
            raise Diverged(f"at the journal's line {rec.line}, run again, the search wrote {_differ(line, had)}")
        self.matched += 1
        return True

    # -- the loop's points (RunWriter) ------------------------------------------------------------
    def on_submit(self, trial: Trial) -> None:
        if not self._match("submit", trial):
            self.store.on_submit(trial)

    def on_report(self, trial: Trial, report: Report) -> None:
        if not self._match("report", trial, report):
            self.store.on_report(trial, report)

    def on_results(self, batch: Sequence[tuple[Trial, Result]]) -> None:
        rest = [(t, r) for t, r in batch if not self._match("result", t, r)]  # (a crash may have torn a batch)
        if rest:
            self.store.on_results(rest)

    def flush(self) -> None:
        if self.caught_up:
            self.store.flush()

    def keep_checkpoint(self, trial_id: int, data: bytes, kept: Container[int]) -> None:
        if self.caught_up:
            self.store.keep_checkpoint(trial_id, data, kept)

    def kept_checkpoints(self) -> list[tuple[int, bytes]]:
        return self.store.kept_checkpoints()

    def note_kept(self, trial_id: int) -> None:
        self.store.note_kept(trial_id)

    def on_best(self, trial: Trial, result: Result, weights: bytes | None) -> None:
        if self.caught_up:  # (before, best.json names the journal's best: fixed once caught up)
            self.store.on_best(trial, result, weights)

    def snapshot_due(self, strategy_seconds: float) -> bool:
        return self.caught_up and self.store.snapshot_due(strategy_seconds)

    def snapshot(self, state: SnapshotState) -> None:
        self.store.snapshot(state)

    def status_due(self) -> bool:
        return self.caught_up and self.store.status_due()

    def write_status(self, status: LoopStatus) -> None:
        if self.caught_up:
            self.store.write_status(status)

    def finish(self, status: LoopStatus, snapshot: SnapshotState | None) -> None:
        if self.caught_up:
            self.store.finish(status, snapshot)


def ended_by_itself(run_dir: Path) -> bool:
    """Whether the run's status.json says its search finished (its budget or time spent): nothing was in flight, so a
    replay of its journal is as exact as running it again."""
    try:
        status = read_status(run_dir)
    except SchemaError:
        return False
    return status is not None and status.state == "finished"


def _differ(line: bytes, had: bytes) -> str:
    """How a record written again differs from the journal's, in a few words (not the records: they are long)."""
    new, old = json.loads(line), json.loads(had)

    def what(rec: dict[str, Any]) -> str:
        return f"a {rec['kind']} of trial {rec['trial']['trial_id']}"

    if what(new) != what(old):
        return f"{what(new)} where the journal has {what(old)}"
    fields = [f"{part}.{key}" for part in ("trial", "result", "report") if part in new
              for key in sorted(set(new[part]) | set(old[part])) if new[part].get(key) != old[part].get(key)]
    return f"{what(new)} that differs from the journal's in {', '.join(fields)}"


__all__ = ["Diverged", "Rerun", "ended_by_itself"]
