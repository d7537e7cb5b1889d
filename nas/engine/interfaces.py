"""The loop's edges: the values it hands out (:class:`LoopStatus`, :class:`SnapshotState`), the callbacks that
hear them (:class:`Callback`), and what it needs of a run directory's writer (:class:`RunWriter`, which
:class:`nas.run.store.RunStore` is). The loop holds these; none of them ever holds the loop.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Container, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from nas.core.types import Report, Result, Trial

if TYPE_CHECKING:
    from nas.engine.protocol import Event
    from nas.engine.replay import Restored


@dataclasses.dataclass(frozen=True, slots=True)
class LoopStatus:
    """The loop as plain values at one moment: what callbacks, ``status.json``, the metrics and the progress
    display show. ``state``: running, finished, stopped (the strategy had nothing more), interrupted or
    failed; ``elapsed`` and ``busy_seconds`` are on the executor's clock."""

    state: str
    strategy: str
    finished: int
    complete: int
    failed: int
    running: int
    queued: int
    workers: int
    budget: int | None
    time_budget: float | None
    elapsed: float
    busy_seconds: float
    best_score: float | None
    best_trial: int | None
    population: int
    strategy_seconds: float
    reports: int
    report_seconds: float
    decisions: Mapping[str, int]
    resumed: int

    @property
    def utilization(self) -> float | None:
        """Summed trial time over ``workers x elapsed`` (the one definition, :mod:`nas.monitor.usage`)."""
        return self.busy_seconds / (self.workers * self.elapsed) if self.workers and self.elapsed > 0 else None

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["decisions"] = dict(self.decisions)
        d["utilization"] = self.utilization
        return d


@dataclasses.dataclass(frozen=True, slots=True)
class SnapshotState:
    """What a snapshot holds of the loop: the strategy's and the scheduler's state (plain data), and the
    strategy's own seconds so far (a snapshot is due once it worked ``replay_seconds`` since the last)."""

    strategy: dict[str, Any]
    scheduler: dict[str, Any] | None
    strategy_seconds: float


class Callback:
    """Hooks for progress display, metrics and the like. Each gets the loop's :class:`LoopStatus` of that
    moment (a value: callbacks never hold the loop)."""

    def on_start(self, status: LoopStatus) -> None: ...
    def on_submit(self, status: LoopStatus, trial: Trial) -> None: ...
    def on_event(self, status: LoopStatus, event: Event) -> None: ...  # started / report / requeued
    def on_result(self, status: LoopStatus, trial: Trial, result: Result) -> None: ...
    def on_end(self, status: LoopStatus) -> None: ...


class RunWriter(Protocol):
    """What the loop calls of a run directory's owner, at a few named points (:class:`nas.run.store.RunStore`):
    a submission (journaled before it runs), a report, a batch of results (journaled with one fsync before the
    strategy hears of them), a kept checkpoint (before its result), a new best (its weights), snapshots when
    due, ``status.json`` when due, and the end. ``restored`` is what a resumed run starts from."""

    restored: Restored | None

    def on_submit(self, trial: Trial) -> None: ...
    def on_report(self, trial: Trial, report: Report) -> None: ...
    def on_results(self, batch: Sequence[tuple[Trial, Result]]) -> None: ...
    def flush(self) -> None: ...
    def keep_checkpoint(self, trial_id: int, data: bytes, kept: Container[int]) -> None: ...
    def kept_checkpoints(self) -> list[tuple[int, bytes]]: ...
    def note_kept(self, trial_id: int) -> None: ...
    def on_best(self, trial: Trial, result: Result, weights: bytes | None) -> None: ...
    def snapshot_due(self, strategy_seconds: float) -> bool: ...
    def snapshot(self, state: SnapshotState) -> None: ...
    def status_due(self) -> bool: ...
    def write_status(self, status: LoopStatus) -> None: ...
    def finish(self, status: LoopStatus, snapshot: SnapshotState | None) -> None: ...


__all__ = ["Callback", "LoopStatus", "RunWriter", "SnapshotState"]
