"""nas.pareto_front / nas.hypervolume on results frames with known fronts (the reader's own frame)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

import nas
from nas.core.front import hypervolume_over_time, reference_point
from nas.core.objectives import hypervolume as core_hypervolume
from nas.core.types import FailureKind, Outcome, Result, Trial
from nas.run.reader import results_frame
from nas.search_spaces.toy import ToySpace, toy_score

OBJ = ["val_acc", "latency_ms:min"]


def frame(points, failed=()):
    """A results frame (nas.run.reader's) of trials with these (val_acc, latency_ms), in finishing order."""
    records = []
    for i, (acc, lat) in enumerate(points):
        trial = Trial(i, {"d0": i})
        if i in failed:
            result = Result.failed(i, "latency over budget", failure=FailureKind.INFEASIBLE,
                                   metrics={"latency_ms": lat}, start_time=float(i), end_time=i + 1.0)
        else:
            result = Result(i, Outcome.COMPLETE, score=acc, scores=[acc, -lat], start_time=float(i),
                            end_time=i + 1.0, metrics={"val_acc": acc, "latency_ms": lat, "loss": 0.1})
        records.append((trial, result))
    return results_frame(records)


def test_the_front_of_the_toy_space_matches_brute_force():
    space = ToySpace()
    archs = [dict(zip(space.decisions, c)) for c in itertools.product(*space.decisions.values())]
    df = pd.DataFrame({"trial_id": range(len(archs)), "state": "COMPLETE",
                       "metrics": [{"acc": toy_score(a), "size": sum(a.values())} for a in archs]})
    front = nas.pareto_front(df, ["acc", "size:min"])
    pts = df.metrics.map(lambda m: (m["acc"], m["size"])).tolist()
    brute = [i for i, (a, s) in enumerate(pts)
             if not any(a2 >= a and s2 <= s and (a2, s2) != (a, s) for a2, s2 in pts)]
    assert sorted(front.trial_id) == brute and len(brute) == 55
    assert list(front.acc) == sorted(front.acc, reverse=True)  # best first in the first objective
    # each size has one best accuracy on the front: accuracy falls as size falls
    assert list(front["size"]) == sorted(front["size"], reverse=True)


def test_failed_infeasible_and_incomplete_rows_never_join():
    df = frame([(0.9, 12.0), (0.99, 1.0), (0.8, 5.0), (0.7, 13.0)], failed={1})
    df.at[3, "metrics"] = {"val_acc": 0.95}  # reported no latency: cannot be ranked
    front = nas.pareto_front(df, OBJ)
    assert front.trial_id.tolist() == [0, 2] and front.latency_ms.tolist() == [12.0, 5.0]
    assert nas.pareto_front(df.iloc[:0], OBJ).empty
    assert nas.pareto_front(df).trial_id.tolist() == [3]  # default: val_acc alone


def test_hypervolume_in_each_metrics_own_sign():
    assert nas.hypervolume([(0.9, 12.0), (0.8, 5.0)], (0.0, 20.0), OBJ) == pytest.approx(0.9 * 8 + 0.8 * 7)
    front = nas.pareto_front(frame([(0.9, 12.0), (0.8, 5.0), (0.5, 30.0)]), OBJ)
    assert nas.hypervolume(front, (0.0, 20.0), OBJ) == pytest.approx(12.8)
    assert nas.hypervolume([(0.9, -12.0)], (0.0, -20.0)) == pytest.approx(7.2)  # no objectives: all maximised
    with pytest.raises(ValueError) as err:
        nas.hypervolume([(0.9, 12.0)], (0.0, 10.0), OBJ)
    assert str(err.value) == ("reference point [0.0, -10.0] must be worse than every point in every objective; "
                              "point 0 [0.9, -12.0] is not")
    with pytest.raises(ValueError, match=r"reference point must be 2 numbers, one per objective, got \[0.0\]"):
        nas.hypervolume([(0.9, 12.0)], (0.0,), OBJ)


def test_hypervolume_over_time_never_falls_and_ends_at_the_fronts():
    rng = np.random.default_rng(0)
    points = [(float(a), float(b)) for a, b in zip(rng.uniform(0.5, 1, 40), rng.uniform(1, 50, 40))]
    df = frame(points, failed={3, 17})
    curve = hypervolume_over_time(df, OBJ)
    assert len(curve) == 38 and (np.diff(curve.hypervolume) >= 0).all()
    assert curve.end_time.is_monotonic_increasing and curve.front_size.iloc[0] == 1
    ok = [p for i, p in enumerate(points) if i not in (3, 17)]
    scores = np.array([(a, -b) for a, b in ok])
    ref = reference_point(scores)
    front = scores[np.array([not any((q >= p).all() and (q > p).any() for q in scores) for p in scores])]
    assert curve.hypervolume.iloc[-1] == pytest.approx(core_hypervolume(front, ref))
    assert curve.front_size.iloc[-1] == len(front) == len(nas.pareto_front(df, OBJ))
    assert hypervolume_over_time(df.iloc[:0], OBJ).empty


def test_the_live_tracker_keeps_the_same_front_and_hypervolume_as_the_batch():
    from nas.core.front import FrontTracker
    from nas.core.objectives import nondominated as mask

    rng = np.random.default_rng(1)
    points = rng.normal(size=(200, 3))
    tracker = FrontTracker()
    for i, p in enumerate(points):
        tracker.add(p)
        tracker.add([float("nan"), 0.0, 0.0])  # a non-finite vector never joins
        seen = points[: i + 1]
        assert tracker.size == int(mask(seen).sum())
    front = points[mask(points)]
    assert sorted(map(tuple, tracker.front)) == sorted(map(tuple, front))
    assert tracker.hypervolume() == pytest.approx(core_hypervolume(front, reference_point(points)))
    one = FrontTracker()
    for v in (0.5, 0.9, 0.7):
        one.add([v])
    assert one.size == 1 and one.hypervolume() == pytest.approx(0.9 - (0.5 - 0.04))  # one objective: best above ref
    assert FrontTracker().hypervolume() == 0.0 and FrontTracker().reference() is None
