"""The Pareto front of a results DataFrame, its hypervolume, and the hypervolume over a run's time.

Built on :mod:`nas.core.objectives` (moocore's non-dominated sorting and hypervolume). A trial joins the
front only when it is COMPLETE and reported every objective as a finite number: FAILED trials
(INFEASIBLE ones included) never do. Objectives are "metric:mode" specs (``val_acc:max``,
``latency_ms:min``); a metric is read from the ``metrics`` dict column that :func:`nas.load_results`
gives, else from a column of that name.

>>> import pandas as pd
>>> df = pd.DataFrame({"trial_id": [0, 1, 2, 3], "state": ["COMPLETE", "COMPLETE", "COMPLETE", "FAILED"],
...                    "metrics": [{"val_acc": 0.9, "latency_ms": 12.0}, {"val_acc": 0.8, "latency_ms": 5.0},
...                                {"val_acc": 0.7, "latency_ms": 13.0}, {"val_acc": 0.99, "latency_ms": 1.0}]})
>>> pareto_front(df, ["val_acc", "latency_ms:min"])[["trial_id", "val_acc", "latency_ms"]].to_dict("records")
[{'trial_id': 0, 'val_acc': 0.9, 'latency_ms': 12.0}, {'trial_id': 1, 'val_acc': 0.8, 'latency_ms': 5.0}]
>>> hypervolume([(0.9, 12.0), (0.8, 5.0)], reference=(0.0, 20.0), objectives=["val_acc", "latency_ms:min"])
12.8
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from nas.core import objectives as core
from nas.core.nearest import did_you_mean
from nas.core.objectives import Objectives
from nas.core.types import Outcome, Result

DEFAULT_OBJECTIVES = ("val_acc:max",)


def objective_frame(df: pd.DataFrame, objectives: Sequence[str] | Objectives = DEFAULT_OBJECTIVES) -> pd.DataFrame:
    """The rows of ``df`` that can be ranked (COMPLETE, every objective a finite number), with a column
    per objective metric in its own sign. Trials a scheduler stopped or paused early are left out: their scores are
    of fewer epochs (ASHA's stopped cells sat on the front with 12-epoch accuracies beside 200-epoch ones: its cheap
    end was the under-trained cells), so a run none of whose trials trained in full yet has an empty front, as the
    live one (the progress bar, the metrics) is."""
    obj = objectives if isinstance(objectives, Objectives) else Objectives(objectives)
    if not isinstance(df, pd.DataFrame):  # (an AttributeError on 'empty')
        raise TypeError(f"a results table is a pandas DataFrame (nas.load_results(RUN)), got {type(df).__name__}")
    if df.empty or ("state" in df and not (df["state"] == "COMPLETE").any()):  # (nothing to rank: every trial failed,
        return df.iloc[:0].assign(**{m: pd.Series(dtype=float) for m in obj.metrics})  # or was infeasible)
    metrics = df["metrics"] if "metrics" in df else pd.Series([{}] * len(df), index=df.index)
    for m in obj.metrics:  # (a name no trial has gave an empty front, silently)
        if m not in df and not metrics.map(lambda d, m=m: isinstance(d, dict) and m in d).any():
            seen = sorted({k for d in metrics if isinstance(d, dict) for k in d} | set(df.columns))
            raise ValueError(f"objective metric {m!r} is in no row of the results{did_you_mean(m, seen)}")
    out = df.copy()
    for m in obj.metrics:
        value = pd.to_numeric(metrics.map(lambda d, m=m: d.get(m) if isinstance(d, dict) else None),
                              errors="coerce").astype(float)
        if m in out:
            value = value.fillna(pd.to_numeric(out[m], errors="coerce").astype(float))
        out[m] = value
    ok = (out["state"] == "COMPLETE") if "state" in out else pd.Series(True, index=out.index)
    ok &= np.isfinite(out[list(obj.metrics)].to_numpy(dtype=float)).all(axis=1)
    if "outcome" in out:
        ok &= out["outcome"] == "COMPLETE"
    return out[ok]


def scores_of(frame: pd.DataFrame, objectives: Objectives) -> np.ndarray:
    """The higher-is-better score matrix of :func:`objective_frame`'s rows."""
    return np.array([[o.score(float(v)) for o, v in zip(objectives, row, strict=True)]
                     for row in frame[list(objectives.metrics)].to_numpy(dtype=float)]).reshape(-1, len(objectives))


def pareto_front(df: pd.DataFrame, objectives: Sequence[str] | Objectives = DEFAULT_OBJECTIVES) -> pd.DataFrame:
    """The rows of a results DataFrame on the Pareto front of ``objectives`` (ties all kept), with a column
    per objective metric, best first in the first objective."""
    obj = objectives if isinstance(objectives, Objectives) else Objectives(objectives)
    frame = objective_frame(df, obj)
    if frame.empty:
        return frame
    front = frame[core.nondominated(scores_of(frame, obj))]
    first = obj.objectives[0]
    return front.sort_values(first.metric, ascending=first.mode == "min", kind="stable")


def hypervolume(points: Any, reference: Sequence[float], objectives: Sequence[str] | None = None) -> float:
    """The hypervolume ``points`` dominate, bounded by ``reference``. Without ``objectives`` every column
    is maximised; with them each column is that objective's metric in its own sign (a ``min`` column
    minimised), and ``points`` may be a DataFrame with those columns. The reference must be worse than
    every point in every objective (a ValueError otherwise)."""
    if objectives is None:
        return core.hypervolume(points, reference)
    obj = Objectives(objectives)
    if isinstance(points, pd.DataFrame):  # (a results table keeps its metrics in a column of mappings)
        points = objective_frame(points, obj)[list(obj.metrics)].to_numpy(dtype=float)
    signs = np.array([1.0 if o.mode == "max" else -1.0 for o in obj])
    try:
        pts = np.asarray(points, dtype=float).reshape(-1, len(obj))
    except (TypeError, ValueError):  # (ragged rows: numpy's "inhomogeneous shape")
        raise ValueError(f"points must be rows of {len(obj)} numbers, one per objective, got "
                         f"{reprlib.repr(points)}") from None
    ref = np.asarray(reference, dtype=float)
    if ref.shape != (len(obj),):
        raise ValueError(f"reference point must be {len(obj)} numbers, one per objective, got {list(reference)!r}")
    return core.hypervolume(pts * signs, ref * signs)


def reference_point(scores: Any, margin: float = 0.1) -> list[float]:
    """A reference for higher-is-better ``scores``: each objective's worst value less ``margin`` of its
    range (or of its magnitude, or 1, where the range is 0), so every point counts."""
    pts = np.asarray(scores, dtype=float)
    low, high = pts.min(axis=0), pts.max(axis=0)
    span = np.where(high > low, high - low, np.where(low != 0, np.abs(low), 1.0))
    return (low - margin * span).tolist()


def hypervolume_over_time(df: pd.DataFrame, objectives: Sequence[str] | Objectives,
                          reference: Sequence[float] | None = None) -> pd.DataFrame:
    """After each ranked trial (in finishing order): ``trial_id``, ``end_time``, the front's ``front_size``
    and ``hypervolume`` (higher-is-better, against ``reference``, default :func:`reference_point` of the
    whole run, so the curve never falls)."""
    obj = objectives if isinstance(objectives, Objectives) else Objectives(objectives)
    frame = objective_frame(df, obj)
    if "end_time" in frame:
        frame = frame.sort_values("end_time", kind="stable")
    scores = scores_of(frame, obj)
    if not len(scores):
        return pd.DataFrame(columns=["trial_id", "end_time", "front_size", "hypervolume"])
    ref = reference_point(scores) if reference is None else list(reference)
    rows, front = [], scores[:0]
    for i in range(len(scores)):
        front = np.vstack([front, scores[i: i + 1]])
        front = front[core.nondominated(front)]  # the front so far: the last front and the new point
        rows.append({"trial_id": frame["trial_id"].iloc[i] if "trial_id" in frame else i,
                     "end_time": frame["end_time"].iloc[i] if "end_time" in frame else math.nan,
                     "front_size": int(len(front)), "hypervolume": core.hypervolume(front, ref)})
    return pd.DataFrame(rows)


def front_point(result: Result) -> Sequence[float] | None:
    """The scores a finished result adds to a live front (:class:`FrontTracker`), as :func:`objective_frame` ranks
    them: a multi-objective result that trained in full (one stopped or paused early scored fewer epochs), else
    None."""
    if result.outcome is Outcome.COMPLETE and result.scores and len(result.scores) > 1:
        return result.scores
    return None


class FrontTracker:
    """The Pareto front of the higher-is-better score vectors seen so far, kept incrementally (for the live
    metrics: O(front) per point), and its hypervolume against :func:`reference_point` of every point seen
    (from running bounds, so it never falls). One objective is a front too: the best point(s), whose
    hypervolume is its distance above the reference.

    >>> t = FrontTracker()
    >>> for p in [(0.9, -12.0), (0.8, -5.0), (0.7, -13.0)]:
    ...     t.add(p)
    >>> t.size, round(t.hypervolume(), 4)  # reference (0.68, -13.8): 0.22 * 1.8 + 0.12 * 7
    (2, 1.236)
    """

    def __init__(self) -> None:
        self.front = np.zeros((0, 0))
        self.low: np.ndarray | None = None
        self.high: np.ndarray | None = None

    @property
    def size(self) -> int:
        return len(self.front)

    def add(self, scores: Sequence[float]) -> None:
        """A feasible result's scores (non-finite ones, and a vector of another length, are ignored)."""
        p = np.asarray(scores, dtype=float).reshape(1, -1)
        if not np.isfinite(p).all() or (self.size and p.shape[1] != self.front.shape[1]):
            return
        self.low = p[0] if self.low is None else np.minimum(self.low, p[0])
        self.high = p[0] if self.high is None else np.maximum(self.high, p[0])
        both = np.vstack([self.front.reshape(-1, p.shape[1]), p])
        self.front = both[core.nondominated(both)]

    def reference(self) -> list[float] | None:
        if self.low is None or self.high is None:
            return None
        return reference_point(np.vstack([self.low, self.high]))

    def hypervolume(self) -> float:
        ref = self.reference()
        return 0.0 if ref is None else core.hypervolume(self.front, ref)


__all__ = ["DEFAULT_OBJECTIVES", "FrontTracker", "front_point", "hypervolume", "hypervolume_over_time",
           "objective_frame", "pareto_front", "reference_point", "scores_of"]
