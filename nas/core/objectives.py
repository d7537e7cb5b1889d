"""Objectives: named metrics with a mode, turned into higher-is-better scores in ONE place; Pareto helpers.

An objective is written ``metric`` (maximised), ``metric:max`` or ``metric:min``. :meth:`Objectives.scores`
is the only place a mode is applied: a minimised metric is negated, so strategies, schedulers and the
Pareto helpers below always see "higher is better". Non-dominated sorting and the hypervolume come from
moocore (López-Ibáñez et al., a maintained C library of multi-objective performance measures).

>>> obj = Objectives(["val_acc", "latency_ms:min"])
>>> obj.scores({"val_acc": 0.9, "latency_ms": 12.5, "loss": 0.3})
(0.9, -12.5)
>>> obj.values((0.9, -12.5))
{'val_acc': 0.9, 'latency_ms': 12.5}
>>> obj.scores({"val_acc": 0.9})
Traceback (most recent call last):
...
ValueError: objective metric 'latency_ms' missing from the result; it reported: val_acc
>>> pareto_ranks([(0.9, -12.0), (0.8, -5.0), (0.7, -13.0)]).tolist()
[0, 0, 1]
>>> round(hypervolume([(0.9, -12.0), (0.8, -5.0)], reference=(0.0, -20.0)), 6)  # 0.9 * 8 + 0.8 * 7
12.8
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

MODES = ("max", "min")


@dataclasses.dataclass(frozen=True)
class Objective:
    """One metric and its mode (``max`` or ``min``)."""

    metric: str
    mode: str = "max"

    def __post_init__(self) -> None:
        if not isinstance(self.metric, str) or not self.metric or ":" in self.metric:
            raise ValueError(f"objective metric must be a non-empty name without ':', got {self.metric!r}")
        if self.mode not in MODES:
            raise ValueError(f"objective mode for {self.metric!r} must be max or min, got {self.mode!r}")

    @classmethod
    def parse(cls, text: str | Objective) -> Objective:
        """``val_acc``, ``val_acc:max`` or ``loss:min``.

        >>> Objective.parse("loss:min")
        Objective(metric='loss', mode='min')
        """
        if isinstance(text, Objective):
            return text
        if not isinstance(text, str):
            raise ValueError(f"an objective is a string like 'val_acc' or 'loss:min', got {text!r}")
        metric, colon, mode = text.strip().partition(":")
        if colon and not mode.strip():  # ('val_acc:' was taken as max: a direction left out, or cut off?)
            raise ValueError(f"objective {text!r} names no mode after its ':'; give max or min, or no ':' (max)")
        return cls(metric.strip(), mode.strip() or "max")

    def score(self, value: float) -> float:
        return value if self.mode == "max" else -value

    def __str__(self) -> str:
        return f"{self.metric}:{self.mode}"


def objective_specs(given: Any) -> list[str | Objective]:
    """The objectives ``given`` as a list: one (``"loss:min"``), several, or a mapping of metric to mode
    (``{"loss": "min"}``, whose modes ``list()`` dropped: loss was maximised).

    >>> objective_specs({"val_acc": "max", "latency_ms": "min"}), objective_specs("loss:min")
    (['val_acc:max', 'latency_ms:min'], ['loss:min'])
    """
    if isinstance(given, str | Objective):
        return [given]
    if isinstance(given, Mapping):
        bad = next(((m, v) for m, v in given.items() if not isinstance(m, str) or not isinstance(v, str)), None)
        if bad is not None:
            raise ValueError(f"objectives as a mapping name each metric's mode, as {{'loss': 'min'}}; got "
                             f"{bad[0]!r}: {bad[1]!r}")
        return [f"{m}:{v}" for m, v in given.items()]
    if not isinstance(given, Sequence):
        raise ValueError(f"objectives are a string like 'val_acc' or 'loss:min', a list of them or a mapping of "
                         f"metric to mode; got {given!r}")
    return list(given)


class Objectives:
    """One or more objectives, in order; each metric at most once (default: ``val_acc`` maximised)."""

    def __init__(self, specs: Sequence[str | Objective] | Mapping[str, str] | str = ("val_acc",)) -> None:
        parsed = [Objective.parse(s) for s in objective_specs(specs)]
        if not parsed:
            raise ValueError("at least one objective is needed, got none")
        seen: set[str] = set()
        for o in parsed:
            if o.metric in seen:
                raise ValueError(f"objective {o.metric!r} is given twice; each metric may appear once")
            seen.add(o.metric)
        self.objectives: tuple[Objective, ...] = tuple(parsed)

    @property
    def metrics(self) -> tuple[str, ...]:
        return tuple(o.metric for o in self.objectives)

    def __len__(self) -> int:
        return len(self.objectives)

    def __iter__(self) -> Iterator[Objective]:
        return iter(self.objectives)

    def __repr__(self) -> str:
        return f"Objectives({[str(o) for o in self.objectives]})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Objectives) and self.objectives == other.objectives

    def __hash__(self) -> int:
        return hash(self.objectives)

    def scores(self, metrics: Mapping[str, Any]) -> tuple[float, ...]:
        """The higher-is-better score of each objective in ``metrics`` (NaN and inf pass through as
        floats, for the caller to treat as a failure); a missing or non-numeric metric is a ValueError."""
        out = []
        for o in self.objectives:
            if o.metric not in metrics:
                seen = ", ".join(sorted(metrics)) or "nothing"
                raise ValueError(f"objective metric {o.metric!r} missing from the result; it reported: {seen}")
            value = metrics[o.metric]
            if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
                raise ValueError(f"objective metric {o.metric!r} must be a number, got {value!r}")
            out.append(o.score(float(value)))
        return tuple(out)

    def score(self, metrics: Mapping[str, Any]) -> float:
        """The one score of a single-objective run."""
        if len(self) != 1:
            raise ValueError(f"a single score needs one objective, got {len(self)}: {self!r}")
        return self.scores(metrics)[0]

    def values(self, scores: Sequence[float]) -> dict[str, float]:
        """Scores back to each metric's own sign, for display."""
        return {o.metric: o.score(float(s)) for o, s in zip(self.objectives, scores, strict=True)}

    def to_list(self) -> list[str]:
        """For run.json: ``Objectives(o.to_list()) == o``."""
        return [str(o) for o in self.objectives]


def _points(scores: Any, what: str = "scores") -> np.ndarray:
    points = np.asarray(scores, dtype=float)
    if points.ndim == 1 and points.size:
        points = points[:, None]
    if points.ndim != 2:
        raise ValueError(f"{what} must be a 2-D array (one row per trial), got shape {points.shape}")
    if not np.isfinite(points).all():
        raise ValueError(f"{what} must be finite numbers (leave failed trials out)")
    return points


def pareto_ranks(scores: Any) -> np.ndarray:
    """The non-domination rank of each row (0 = on the Pareto front), all columns maximised (NSGA-II's
    non-dominated sorting, Deb et al. 2002, by moocore)."""
    import moocore

    points = _points(scores)
    if not len(points):
        return np.zeros(0, dtype=int)
    return np.asarray(moocore.pareto_rank(points, maximise=True), dtype=int)


def nondominated(scores: Any) -> np.ndarray:
    """A boolean mask of the rows no other row dominates (duplicates of a front point all kept)."""
    return pareto_ranks(scores) == 0


def crowding_distance(scores: Any) -> np.ndarray:
    """NSGA-II's crowding distance (Deb et al. 2002) of each row within the given set: the boundary rows
    of each objective get inf. Hand-written (ten lines): moocore has none, and Optuna's and pymoo's are
    private to their samplers.

    >>> crowding_distance([(1.0, 4.0), (2.0, 2.0), (4.0, 1.0)]).tolist()
    [inf, 2.0, inf]
    """
    points = _points(scores)
    n, k = points.shape
    distance = np.zeros(n)
    for j in range(k):
        order = np.argsort(points[:, j], kind="stable")
        column = points[order, j]
        span = column[-1] - column[0] if n else 0.0
        distance[order[0]] = distance[order[-1]] = math.inf
        if n > 2 and span > 0:
            distance[order[1:-1]] += (column[2:] - column[:-2]) / span
    return distance


def hypervolume(scores: Any, reference: Sequence[float]) -> float:
    """The hypervolume the rows dominate, all columns maximised, bounded below by ``reference``, which
    every row must beat in every objective (by moocore)."""
    import moocore

    points = _points(scores)
    ref = np.asarray(reference, dtype=float)
    if ref.shape != (points.shape[1],) or not np.isfinite(ref).all():
        raise ValueError(f"reference point must be {points.shape[1]} finite numbers, got {list(reference)!r}")
    worse = ~(points > ref).all(axis=1)
    if worse.any():
        i = int(np.argmax(worse))
        raise ValueError(f"reference point {ref.tolist()} must be worse than every point in every objective; "
                         f"point {i} {points[i].tolist()} is not")
    if not len(points):
        return 0.0
    return float(moocore.hypervolume(points, ref=ref, maximise=True))


__all__ = ["MODES", "Objective", "Objectives", "crowding_distance", "hypervolume", "nondominated", "pareto_ranks"]
