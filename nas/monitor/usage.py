"""One definition of a run's counts, wall time and worker utilization, shared by every display.

The end-of-search summary, ``nas status``, the Ray metrics and ``nas report`` all call these, so they
agree on the same run:

- wall time: seconds from the session's start (the run's first trial start, when unknown) to its last
  finished trial, or to now while it is still running;
- utilization: the summed durations of the trials that finished in that window, over
  ``workers * wall`` (the live loop's :attr:`nas.engine.interfaces.LoopStatus.utilization` is the same ratio on
  its own clock).

When the run's ``status.json`` holds the loop's own figures (``elapsed``, ``busy_seconds``, on the executor's
clock: simulated seconds for a simulated run), :func:`session_usage` takes them, so ``nas status``, the summary,
the report and the Ray gauge show the very number the loop computed; only a run without one is measured from
its journal.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
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
        util = util if util is None or math.isfinite(util) else None  # (a wall of 1e-320 s: unknown, not inf)
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


def session_usage(df: pd.DataFrame, live: Mapping[str, Any] | None, workers: int | None, *,
                  now: float | None = None, wall_clock: bool = True) -> Usage:
    """The :class:`Usage` of the run's latest session: the loop's own ``elapsed`` and ``busy_seconds`` from
    ``live`` (its ``status.json``) when it has them, plus the wall time since that file was written when the
    run is still running (``now`` given) on a ``wall_clock`` executor; else :func:`run_usage` of the journal.

    >>> live = {"elapsed": 926.7, "busy_seconds": 3545.5, "workers": 4, "updated": 100.0, "started": 99.0}
    >>> round(session_usage(pd.DataFrame(), live, 4).utilization, 4)
    0.9565
    >>> session_usage(pd.DataFrame(), live, 4, now=110.0).wall
    936.7
    >>> session_usage(pd.DataFrame(), live, 4, now=110.0, wall_clock=False).wall  # simulated: its own clock
    926.7
    """
    if live and live.get("elapsed") is not None and live.get("busy_seconds") is not None:
        wall = float(live["elapsed"])
        if now is not None and wall_clock and live.get("updated") is not None:
            wall += max(now - float(live["updated"]), 0.0)
        return Usage.of(busy=float(live["busy_seconds"]), wall=wall, workers=workers or live.get("workers"))
    return run_usage(df, workers, started=(live or {}).get("started"), now=now)
