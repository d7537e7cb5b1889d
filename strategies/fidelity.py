"""Scores per fidelity, compared like with like: shared by the strategies that may meet a scheduler's rungs.

With a scheduler that stops or pauses trials at rungs (ASHA, Hyperband), a strategy hears of a trial when it first
ends (:meth:`nas.core.strategy.Strategy.tell`: maybe stopped or paused at 12 epochs) and again when a promotion has
trained it further (:meth:`~nas.core.strategy.Strategy.update`: 200 epochs, say). A 200-epoch accuracy is not
comparable with a 12-epoch one (it is nearly always higher), so each architecture keeps one score per fidelity
(``result.epoch`` -> score) and candidates are compared at the HIGHEST FIDELITY THEY ALL SHARE. Where they share
none (one trained straight to 200 epochs in a Hyperband bracket that starts there, one stopped at 12; or a member
of a snapshot written before fidelities were kept, at "fidelity 0"), each is ranked within its own highest
fidelity: its quantile among the ``reference`` architectures (a population, recent results) scored there; without
a reference, the scores are taken as they are.

>>> best_of([{12: 0.84, 200: 0.91}, {12: 0.85}])  # shared: 12 epochs only
1
>>> best_of([{12: 0.84, 200: 0.91}, {12: 0.85, 200: 0.90}])  # shared up to 200
0
>>> population = [{200: 0.90}, {200: 0.93}, {12: 0.86}, {12: 0.80}]
>>> best_of(population[:1] + population[2:3], population)  # 0.90 is the lower of two at 200, 0.86 the higher at 12
1
>>> best_of([{0: 0.5}, {3: 0.6}]), better({12: 0.8}, {12: 0.8})
(1, False)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nas.core.types import Result

Fidelities = dict[int, float]  # epochs -> score (higher is better)


def add(scores: Fidelities, result: Result) -> Fidelities:
    """``scores`` with ``result``'s score at its fidelity (``result.epoch``; 0 where the result gives none)."""
    if result.ok and result.score is not None:
        scores[int(result.epoch or 0)] = float(result.score)
    return scores


def shared_fidelity(candidates: Sequence[Mapping[int, float]]) -> int | None:
    """The highest fidelity every candidate has a score at (None where they share none)."""
    common = set(candidates[0]).intersection(*candidates[1:]) if candidates else set()
    return max(common) if common else None


def quantile(scores: Mapping[int, float], reference: Sequence[Mapping[int, float]]) -> float:
    """Where ``scores`` ranks at its highest fidelity among the ``reference`` scored there (mid-rank, 0 to 1; 0.5
    where none is)."""
    f = max(scores)
    values = [r[f] for r in reference if f in r]
    if not values:
        return 0.5
    v = scores[f]
    return (sum(x < v for x in values) + 0.5 * sum(x == v for x in values)) / len(values)


def best_of(candidates: Sequence[Mapping[int, float]], reference: Sequence[Mapping[int, float]] = ()) -> int:
    """The index of the best candidate, like with like: by score at their highest shared fidelity; where they share
    none, by each one's :func:`quantile` in ``reference`` (without one: its score at its highest fidelity). Ties:
    the first."""
    f = shared_fidelity(candidates)
    if f is not None:
        return max(range(len(candidates)), key=lambda i: candidates[i][f])
    if reference:
        return max(range(len(candidates)), key=lambda i: quantile(candidates[i], reference))
    return max(range(len(candidates)), key=lambda i: candidates[i][max(candidates[i])])


def better(a: Mapping[int, float], b: Mapping[int, float], reference: Sequence[Mapping[int, float]] = ()) -> bool:
    """Whether ``a`` is strictly better than ``b`` (the rule of :func:`best_of`)."""
    f = shared_fidelity([a, b])
    if f is not None:
        return a[f] > b[f]
    if reference:
        return quantile(a, reference) > quantile(b, reference)
    return a[max(a)] > b[max(b)]


def to_data(scores: Mapping[int, float]) -> list[list[Any]]:
    """JSON data for a snapshot (keys of a JSON object are strings; these stay ints)."""
    return [[int(e), float(s)] for e, s in sorted(scores.items())]


def from_data(data: Sequence[Sequence[Any]]) -> Fidelities:
    return {int(e): float(s) for e, s in data}
