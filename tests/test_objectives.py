"""Objectives (parsing, the one place a mode is applied, one-line errors) and the Pareto helpers,
checked against brute-force references on seeded random points."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from nas.core.objectives import Objective, Objectives, crowding_distance, hypervolume, nondominated, pareto_ranks


def test_parsing():
    assert Objective.parse("val_acc") == Objective("val_acc", "max")
    assert Objective.parse(" loss : min ") == Objective("loss", "min")
    assert Objectives().metrics == ("val_acc",)
    obj = Objectives(["val_acc:max", "latency_ms:min", "params"])
    assert obj.to_list() == ["val_acc:max", "latency_ms:min", "params:max"]
    assert Objectives(obj.to_list()) == obj and len(obj) == 3
    assert Objectives("loss:min").metrics == ("loss",)
    # (list({"loss": "min"}) is ["loss"]: the mode was dropped, and loss maximised)
    assert Objectives({"val_acc": "max", "loss": "min"}).to_list() == ["val_acc:max", "loss:min"]


@pytest.mark.parametrize(("specs", "message"), [
    (["val_acc", "val_acc:min"], "objective 'val_acc' is given twice; each metric may appear once"),
    (["loss:minimise"], "objective mode for 'loss' must be max or min, got 'minimise'"),
    ([":max"], "objective metric must be a non-empty name without ':', got ''"),
    (["a:min:max"], "objective mode for 'a' must be max or min, got 'min:max'"),
    ([3], "an objective is a string like 'val_acc' or 'loss:min', got 3"),
    ([], "at least one objective is needed, got none"),
    ({"loss": 3}, "objectives as a mapping name each metric's mode, as {'loss': 'min'}; got 'loss': 3"),
    ({"loss": "least"}, "objective mode for 'loss' must be max or min, got 'least'"),
    (3, "objectives are a string like 'val_acc' or 'loss:min', a list of them or a mapping of metric to mode; got 3"),
])
def test_bad_objectives_are_one_line_errors(specs, message):
    with pytest.raises(ValueError) as err:
        Objectives(specs)
    assert str(err.value) == message


def test_scores_apply_the_mode_once():
    obj = Objectives(["val_acc", "loss:min"])
    assert obj.scores({"val_acc": np.float32(0.5), "loss": np.int64(2), "other": "x"}) == (0.5, -2.0)
    assert obj.values(obj.scores({"val_acc": 0.5, "loss": 2.0})) == {"val_acc": 0.5, "loss": 2.0}
    nan = obj.scores({"val_acc": float("nan"), "loss": 1.0})[0]
    assert nan != nan  # NaN passes through, for the caller to fail the trial
    assert Objectives("loss:min").score({"loss": 0.25}) == -0.25
    with pytest.raises(ValueError, match="a single score needs one objective, got 2"):
        obj.score({"val_acc": 0.5, "loss": 2.0})


def test_a_missing_or_non_numeric_metric_names_it_and_what_was_seen():
    obj = Objectives(["val_acc", "loss:min"])
    with pytest.raises(ValueError) as err:
        obj.scores({"val_acc": 0.9, "train_loss": 0.1, "epoch": 3})
    assert str(err.value) == "objective metric 'loss' missing from the result; it reported: epoch, train_loss, val_acc"
    with pytest.raises(ValueError, match="it reported: nothing"):
        obj.scores({})
    with pytest.raises(ValueError, match="objective metric 'val_acc' must be a number, got 'high'"):
        obj.scores({"val_acc": "high", "loss": 1.0})


def dominates(a, b):
    return all(x >= y for x, y in zip(a, b, strict=True)) and any(x > y for x, y in zip(a, b, strict=True))


def brute_ranks(points):
    ranks, remaining, r = {}, set(range(len(points))), 0
    while remaining:
        front = {i for i in remaining if not any(dominates(points[j], points[i]) for j in remaining)}
        ranks.update(dict.fromkeys(front, r))
        remaining -= front
        r += 1
    return [ranks[i] for i in range(len(points))]


@pytest.mark.parametrize("k", [1, 2, 3])
def test_pareto_ranks_match_brute_force(k):
    rng = np.random.default_rng(k)
    for _ in range(20):
        points = rng.integers(0, 6, size=(int(rng.integers(1, 25)), k)).astype(float)  # small ints: ties
        assert pareto_ranks(points).tolist() == brute_ranks(points.tolist())
        assert nondominated(points).tolist() == [r == 0 for r in brute_ranks(points.tolist())]
    assert pareto_ranks(np.zeros((0, 2))).tolist() == []


def brute_hypervolume(points, ref):
    """Exact, by coordinate compression: a grid cell counts when some point dominates its upper corner."""
    axes = [sorted({r, *(p[j] for p in points)}) for j, r in enumerate(ref)]
    volume = 0.0
    for cell in itertools.product(*(range(len(a) - 1) for a in axes)):
        upper = [axes[j][i + 1] for j, i in enumerate(cell)]
        if any(all(p[j] >= upper[j] for j in range(len(ref))) for p in points):
            volume += float(np.prod([axes[j][i + 1] - axes[j][i] for j, i in enumerate(cell)]))
    return volume


@pytest.mark.parametrize("k", [2, 3])
def test_hypervolume_matches_brute_force(k):
    rng = np.random.default_rng(10 + k)
    for _ in range(10):
        points = rng.uniform(0.1, 1.0, size=(int(rng.integers(1, 8)), k))
        assert hypervolume(points, [0.0] * k) == pytest.approx(brute_hypervolume(points.tolist(), [0.0] * k))
    assert hypervolume(np.zeros((0, 2)), [0.0, 0.0]) == 0.0


def test_hypervolume_bad_reference():
    with pytest.raises(ValueError) as err:
        hypervolume([(0.9, -12.0), (0.8, -25.0)], reference=(0.0, -20.0))
    assert str(err.value) == ("reference point [0.0, -20.0] must be worse than every point in every objective; "
                              "point 1 [0.8, -25.0] is not")
    with pytest.raises(ValueError, match=r"reference point must be 2 finite numbers, got \[0.0\]"):
        hypervolume([(0.9, -12.0)], reference=[0.0])
    with pytest.raises(ValueError, match="scores must be finite numbers"):
        hypervolume([(float("nan"), 1.0)], reference=[0.0, 0.0])


def test_crowding_distance():
    d = crowding_distance([(1.0, 5.0), (2.0, 3.0), (3.0, 2.0), (5.0, 1.0)])
    # middle rows: (3 - 1) / 4 + (5 - 2) / 4 and (5 - 2) / 4 + (3 - 1) / 4
    assert d.tolist() == [np.inf, 1.25, 1.25, np.inf]
    assert crowding_distance([(1.0, 2.0), (2.0, 1.0)]).tolist() == [np.inf, np.inf]
    assert crowding_distance([(1.0, 1.0), (1.0, 1.0), (1.0, 1.0)])[1] == 0.0  # no spread: no distance
