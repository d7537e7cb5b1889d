"""Several objectives for a single-objective strategy: ParEGO's random augmented Chebyshev scalarization.

Knowles 2006, "ParEGO: A Hybrid Algorithm With On-Line Landscape Approximation for Expensive
Multiobjective Optimization Problems": each ask draws a new weight vector ``w`` (here uniformly from the
simplex, seeded), and that trial's ``scores`` (higher-is-better, one per objective) become the one score
its inner strategy is told::

    d_i   = (high_i - f_i) / (high_i - low_i)            # 0 at the best value seen so far, 1 at the worst
    score = -(max_i w_i d_i + rho * sum_i w_i d_i)      # ParEGO's augmented Chebyshev, negated

``low``/``high`` are the bounds of the feasible scores seen so far (ParEGO normalises by the known
ranges; an asynchronous search knows only what has come back, so earlier trials keep the score they
were told under the bounds of their time). Until those bounds have a span (the first result, and any
equal to it) every ``d_i`` is 0.5: such a result is neither the best nor the worst yet, so it is told a
middling score, below one that dominates it and above one it dominates. FAILED trials (INFEASIBLE ones
included) pass through as failures and never move the bounds.

Which strategies take several objectives is the class attribute :attr:`nas.core.strategy.Strategy.multi_objective`:
``native`` ones (evolution, optuna, random) rank the objectives themselves; ``scalarize`` ones (rl, and a user's
strategy by default) run inside :class:`Scalarized`; ``refuse`` ones (pbt) cannot, and say why in ``refusal``.

>>> from nas.search_spaces.toy import ToySpace
>>> from nas.strategies.evolution import RegularizedEvolution
>>> from nas.core.types import Result, TrialState
>>> s = Scalarized(RegularizedEvolution(ToySpace(), population=4, sample_size=2, seed=0),
...                ["val_acc", "latency_ms:min"], seed=0)
>>> for acc, lat in [(0.5, 10.0), (0.9, 30.0), (0.7, 20.0)]:
...     t = s.ask()
...     s.tell(t, Result(t.trial_id, TrialState.COMPLETE, score=acc, scores=[acc, -lat]))
>>> [round(m.score, 3) for m in s.inner.population]  # each told under its own random weights
[-0.34, -0.476, -0.452]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nas.core.objectives import Objectives
from nas.core.strategy import Strategy, check_fraction
from nas.core.types import Result, Trial


def check_objectives(cls: type[Strategy], objectives: Sequence[str]) -> None:
    """A one-line ValueError when strategy class ``cls`` refuses the several ``objectives`` of a run."""
    from nas.core.registry import strategies

    if cls.multi_objective == "refuse" and len(Objectives(objectives)) > 1:
        able = [n for n, c in strategies.items() if c.multi_objective != "refuse"]
        raise ValueError(f"strategy {cls.registered_name or cls.__name__!r} cannot search several objectives "
                         f"({', '.join(objectives)}): {cls.refusal}; use one of {', '.join(able)}, or one objective")


def for_objectives(strategy: Strategy, objectives: Sequence[str], *, seed: int | None = None,
                   rho: float = 0.05) -> Strategy:
    """``strategy`` as it runs on ``objectives``: itself for one objective or a native strategy, wrapped in
    :class:`Scalarized` where it scalarizes; a refusing one is a ValueError."""
    check_objectives(type(strategy), objectives)
    if len(Objectives(objectives)) < 2 or strategy.multi_objective == "native":
        return strategy
    return Scalarized(strategy, objectives, seed=seed, rho=rho)


class Scalarized(Strategy):
    """A single-objective ``inner`` strategy told ParEGO's random augmented Chebyshev scalarization of
    each result's ``scores`` (see the module docstring); ``rho`` (default 0.05, as in ParEGO) weighs the
    augmentation term that keeps weakly dominated points from tying."""

    multi_objective = "native"

    def __init__(self, inner: Strategy, objectives: Sequence[str], *, seed: int | None = None,
                 rho: float = 0.05) -> None:
        super().__init__(inner.space, seed=seed)
        self.rng = np.random.default_rng(None if seed is None else [int(seed), 0x9A2E60])  # apart from inner's
        self.inner = inner
        self.objectives = Objectives(objectives)
        self.rho = check_fraction("rho", rho)
        self.low: list[float] | None = None  # the feasible scores' bounds so far (None before the first)
        self.high: list[float] | None = None
        self._weights: dict[int, list[float]] = {}  # trial id -> its weight vector, until its result

    @property
    def name(self) -> str:
        return f"parego({self.inner.name})"

    def population_size(self) -> int:
        return self.inner.population_size()

    def checkpoints_needed(self) -> int:
        return self.inner.checkpoints_needed()

    def expendable(self, kept: Sequence[int]) -> int | None:
        return self.inner.expendable(kept)

    def ask(self) -> Trial | None:
        trial = self.inner.ask()
        if trial is not None:
            self._weights[trial.trial_id] = self.rng.dirichlet(np.ones(len(self.objectives))).tolist()
        return trial

    def scalarize(self, result: Result, weights: Sequence[float]) -> Result:
        """``result`` with ``score`` the augmented Chebyshev scalarization of its ``scores`` (bounds updated
        first); FAILED results unchanged."""
        if not result.ok:
            return result
        scores = result.scores if result.scores is not None else [result.score]
        if len(scores) != len(self.objectives) or any(s is None for s in scores):
            raise ValueError(f"trial {result.trial_id}'s result has scores {scores}; this run has "
                             f"{len(self.objectives)} objectives: {', '.join(self.objectives.to_list())}")
        f = np.asarray(scores, dtype=float)
        low = f if self.low is None else np.minimum(self.low, f)
        high = f if self.high is None else np.maximum(self.high, f)
        self.low, self.high = low.tolist(), high.tolist()
        span = high - low
        if not (span > 0).any():  # (told 0, the best score there is, the first result was every strategy's best)
            d = np.full_like(f, 0.5)  # one point, or equal ones: neither best nor worst yet, so midway
        else:
            d = np.divide(high - f, span, out=np.zeros_like(f), where=span > 0)
        w = np.asarray(weights, dtype=float)
        value = float(np.max(w * d) + self.rho * np.sum(w * d))
        return dataclasses.replace(result, score=0.0 - value, scores=[0.0 - value])  # (0.0 -: never -0.0)

    def tell(self, trial: Trial, result: Result) -> None:
        weights = self._weights.pop(trial.trial_id, None)
        equal = [1.0 / len(self.objectives)] * len(self.objectives)
        self.inner.tell(trial, self.scalarize(result, weights or equal))

    def update(self, trial: Trial, result: Result) -> None:
        """A later result of a trial already told (an ASHA promotion), scalarized with equal weights (its
        own were spent at its first result)."""
        self.inner.update(trial, self.scalarize(result, [1.0 / len(self.objectives)] * len(self.objectives)))

    def warm_start(self, trial: Trial, result: Result) -> None:
        """An earlier run's trial (:mod:`nas.run.warmstart`), scalarized with equal weights, to the inner
        strategy's own ``warm_start``."""
        self.inner.warm_start(trial, self.scalarize(result, [1.0 / len(self.objectives)] * len(self.objectives)))

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "inner": self.inner.state_dict(), "low": self.low, "high": self.high,
                "weights": dict(self._weights)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.inner.load_state_dict(state["inner"])
        self.low = None if state["low"] is None else [float(v) for v in state["low"]]
        self.high = None if state["high"] is None else [float(v) for v in state["high"]]
        self._weights = {int(k): [float(x) for x in v] for k, v in state["weights"].items()}


__all__ = ["Scalarized", "check_objectives", "for_objectives"]
