"""One definition of a run's counts, wall time and worker utilization, shared by every display.

The end-of-search summary, ``nas status``, the Ray metrics and ``nas report`` all call these, so they
agree on the same run:

- wall time: seconds from the session's start (the run's first trial start, when unknown) to its last
  finished trial, or to now while it is still running;
- utilization: the summed durations of the trials that finished in that window, over
  ``workers * wall``;
- counts by state *name* (``COMPLETE``, ``FAILED``, ``RUNNING``, ``QUEUED``...), so that a state an
  executor adds later (a prefetched trial is ``QUEUED``) is shown as itself, never as running. At most
  ``workers`` trials can run at once; anything beyond that reported as running is queued behind them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd


@dataclasses.dataclass(frozen=True)
class Usage:
    """Wall time, busy worker-seconds and their ratio for one session of a run.

    >>> Usage.of(busy=30.0, wall=20.0, workers=2).utilization
    0.75
    """

    wall: float
    busy: float
    workers: int
    utilization: float | None

    @classmethod
    def of(cls, *, busy: float, wall: float, workers: int | None) -> Usage:
        n = int(workers or 0)
        util = busy / (wall * n) if wall > 0 and n > 0 else None
        return cls(wall=max(wall, 0.0), busy=busy, workers=n, utilization=util)


def run_usage(df: pd.DataFrame, workers: int | None, *, started: float | None = None,
              now: float | None = None) -> Usage:
    """The :class:`Usage` of the session that began at ``started`` (wall-clock seconds; default the first
    trial's start), ending at ``now`` if given (the run still runs) else at its last finished trial.
    ``df`` has the results frame's ``start_time``, ``end_time`` and ``duration`` columns.

    >>> df = pd.DataFrame({"start_time": [0.0, 0.0, 5.0], "end_time": [5.0, 10.0, 10.0],
    ...                    "duration": [5.0, 10.0, 5.0]})
    >>> run_usage(df, 2)
    Usage(wall=10.0, busy=20.0, workers=2, utilization=1.0)
    >>> run_usage(df, 2, now=20.0).utilization
    0.5
    """
    if started is None:
        started = float(df.start_time.min()) if len(df) and df.start_time.notna().any() else None
    if started is None:
        return Usage.of(busy=0.0, wall=0.0, workers=workers)
    end = now if now is not None else (float(df.end_time.max()) if len(df) else started)
    session = df[df.end_time >= started] if len(df) else df
    busy = float(session.duration.fillna(0).sum()) if len(session) else 0.0
    return Usage.of(busy=busy, wall=end - started, workers=workers)


def state_counts(states: Iterable[Any] | Mapping[Any, int]) -> dict[str, int]:
    """Trials per state name, from state values (``TrialState`` members or strings) or a mapping of them
    to counts (a ``collections.Counter`` of states).

    >>> state_counts(["COMPLETE", "FAILED", "COMPLETE"])
    {'COMPLETE': 2, 'FAILED': 1}
    """
    out: dict[str, int] = {}
    items = states.items() if isinstance(states, Mapping) else ((s, 1) for s in states)
    for state, n in items:
        name = str(getattr(state, "value", state))
        out[name] = out.get(name, 0) + int(n)
    return out


def busy_and_queued(counts: Mapping[str, int], workers: int | None) -> tuple[int, int]:
    """(running, queued): trials training now and trials waiting for a worker. ``QUEUED`` (and
    ``PENDING``, submitted but not started) are queued; ``RUNNING`` beyond ``workers`` is queued too
    (an executor that prefetches without a QUEUED state reports its queue as running).

    >>> busy_and_queued({"RUNNING": 3, "COMPLETE": 7}, 2)
    (2, 1)
    >>> busy_and_queued({"RUNNING": 1, "QUEUED": 2}, 2)
    (1, 2)
    """
    running = int(counts.get("RUNNING", 0))
    queued = int(counts.get("QUEUED", 0)) + int(counts.get("PENDING", 0))
    if workers:
        queued += max(running - int(workers), 0)
        running = min(running, int(workers))
    return running, queued


def loop_counts(loop: Any) -> dict[str, int]:
    """The live loop's trials per state name (every state of its ``TrialState`` enum, QUEUED if it has one).

    >>> class Loop:
    ...     def count(self, *states): return {"RUNNING": 2}.get(states[0].value, 0)
    >>> loop_counts(Loop())["RUNNING"]
    2
    """
    from nas.core.types import TrialState

    return {s.value: int(loop.count(s)) for s in TrialState}


def loop_usage(loop: Any) -> Usage:
    """The live loop's :class:`Usage` (its elapsed time on the executor's clock, its summed trial times)."""
    return Usage.of(busy=float(loop.busy_seconds), wall=float(loop.elapsed), workers=int(loop.executor.slots))
