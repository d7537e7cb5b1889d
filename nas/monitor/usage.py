"""One definition of a run's counts, wall time and worker utilization, shared by every display.

The end-of-search summary, ``nas status``, the Ray metrics and ``nas report`` all call these, so they
agree on the same run:

- wall time: seconds from the session's start (the run's first trial start, when unknown) to its last
  finished trial, or to now while it is still running;
- utilization: the summed durations of the trials that finished in that window, over
  ``workers * wall`` (the live loop's :attr:`nas.engine.loop.LoopStatus.utilization` is the same ratio on
  its own clock).
"""

from __future__ import annotations

import dataclasses

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
