"""Predictor-guided evolution: an ensemble of MLPs predicts each candidate's score, an acquisition picks the next.

BANANAS (White, Neiswanger & Savani 2021, AAAI, Algorithm 1), with NPENAS' candidate generation (Wei et al. 2022,
"NPENAS: Neural Predictor Guided Evolution for Neural Architecture Search", TNNLS: mutations of the best
architectures found), made asynchronous and written for any space:

- The first ``init`` asks are random (or, with a ``warmup``, the proxy's top K).
- Then every ask fits the ensemble (:class:`nas.strategies.ensemble.MLPEnsemble`, ``ensemble`` members) to the
  results so far, on a one-hot encoding of each decision (:meth:`nas.core.space.SearchSpace.encode`); takes as
  candidates the one-decision mutations of the ``parents`` best results (all of them, or ``candidates`` drawn at
  random where there are more), less those evaluated or in flight (pending trials are excluded, as a batch of
  BANANAS is); and asks the one with the highest acquisition: ``"its"`` (independent Thompson sampling, BANANAS'
  choice: a draw from N(mean, std) of the ensemble for each candidate), ``"ucb"`` (mean + 1.0 std) or ``"mean"``.

Scores of several fidelities (a scheduler's rungs, promoted trials' :meth:`PredictorGuided.update`) are never mixed
in one fit: the ensemble learns the fidelity most results have, and parents are ranked like with like
(:mod:`nas.strategies.fidelity`). The data it fits are the ``history`` results kept: all of them up to that
bound; beyond it the best half and the most recent half, so the state stays bounded however long the run. The
seconds spent fitting are counted in ``fit_seconds`` (the bench prints them apart).

>>> from nas.search_spaces.toy import ToySpace, toy_score
>>> from nas.core.types import Outcome, Result
>>> p = PredictorGuided(ToySpace(), init=8, seed=0)
>>> found = []
>>> for _ in range(30):
...     t = p.ask()
...     found.append(toy_score(t.arch))
...     p.tell(t, Result(t.trial_id, Outcome.COMPLETE, score=found[-1], epoch=1))
>>> max(found[:8]) < max(found[8:])  # the predicted picks beat the random start
True
"""

from __future__ import annotations

import collections
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from nas.core.registry import register_strategy
from nas.core.space import SearchSpace
from nas.core.strategy import Strategy, check_positive_int
from nas.core.types import Result, Trial
from nas.strategies.ensemble import MLPEnsemble
from nas.strategies.fidelity import Fidelities, add, from_data, to_data
from nas.strategies.local import neighbours
from nas.strategies.random import fingerprint
from nas.strategies.warmup import ProxyWarmup, make_pool

ACQUISITIONS = ("its", "ucb", "mean")


@register_strategy("predictor")
class PredictorGuided(ProxyWarmup, Strategy):
    """Options: ``init`` (random asks before the model; default 10), ``ensemble`` (members, 5), ``candidates``
    (most mutations scored per ask, 1000), ``parents`` (best results mutated, 10), ``acquisition`` (``its``,
    ``ucb`` or ``mean``), ``history`` (results kept for the fit, 128), ``refit`` (results between two fits of the
    ensemble, 3; the fitted model is part of the state, so a restored strategy asks what the original would),
    ``warmup`` (``"PROXY:M:K"``, :mod:`nas.strategies.warmup`)."""

    def __init__(self, space: SearchSpace, *, seed: int | None = None, init: int = 10, ensemble: int = 5,
                 candidates: int = 1000, parents: int = 10, acquisition: str = "its", history: int = 128,
                 refit: int = 3, warmup: str | None = None) -> None:
        super().__init__(space, seed=seed)
        self.init = check_positive_int("init", init)
        self.ensemble = check_positive_int("ensemble", ensemble)
        self.candidates = check_positive_int("candidates", candidates)
        self.parents = check_positive_int("parents", parents)
        self.history = check_positive_int("history", history, minimum=2)
        self.refit = check_positive_int("refit", refit)
        if acquisition not in ACQUISITIONS:
            raise ValueError(f"acquisition must be one of {', '.join(ACQUISITIONS)}; got {acquisition!r}")
        self.acquisition = acquisition
        self.warmup_pool = make_pool(warmup)
        self.data: collections.OrderedDict[int, tuple[dict[str, Any], Fidelities]] = collections.OrderedDict()
        self.failed: collections.deque[int] = collections.deque(maxlen=self.history // 4)  # recent failed fingerprints
        self.pending: dict[int, dict[str, Any]] = {}  # trial id -> arch, in flight
        self.random_asked = 0
        self.model: MLPEnsemble | None = None
        self.told = 0  # results (and updates) taken in
        self.fitted_at = -1  # ``told`` when the model was fitted
        self.fit_seconds = 0.0  # a timing, not state
        self._offsets = np.cumsum([0, *space.cardinalities])

    # -- asking ----------------------------------------------------------------------------------
    def ask(self) -> Trial:
        if self.random_asked < self.init or not self.data:
            arch = self._start_arch()  # (first: a warm-up not yet answered raises, changing nothing)
            self.random_asked += 1
        else:
            arch = self._acquire()
        trial = self.trial(arch)
        self.pending[trial.trial_id] = dict(arch)
        return trial

    def _start_arch(self) -> dict[str, Any]:
        if self.warmup_pool is not None:
            for arch in self.warmup_pool.take(1):
                return arch
        return self.space.sample(self.rng)

    def _taken(self) -> set[int]:
        return {*self.data, *self.failed, *(fingerprint(a) for a in self.pending.values())}

    def _acquire(self) -> dict[str, Any]:
        fidelity, archs, y = self._training_set()
        ranked = sorted(range(len(archs)), key=lambda i: -y[i])[:self.parents]
        taken, pool, keys = self._taken(), [], set()
        for i in ranked:  # every unevaluated one-edit neighbour of the best
            for child in neighbours(self.space, archs[i]):
                key = fingerprint(child)
                if key not in taken and key not in keys:
                    keys.add(key)
                    pool.append(child)
        if len(pool) > self.candidates:
            pool = [pool[int(i)] for i in self.rng.choice(len(pool), self.candidates, replace=False)]
        if not pool:  # every mutation of the best is known: explore
            return self.space.sample(self.rng)
        t0 = time.perf_counter()
        if self.model is None or self.told - self.fitted_at >= self.refit:
            self.model = MLPEnsemble(members=self.ensemble, seed=int(self.rng.integers(2**31)))
            self.model.fit(self._encode(archs), np.array(y))
            self.fitted_at = self.told
        mean, std = self.model.predict(self._encode(pool))
        self.fit_seconds += time.perf_counter() - t0
        if self.acquisition == "its":
            value = self.rng.normal(mean, std + 1e-12)
        elif self.acquisition == "ucb":
            value = mean + std
        else:
            value = mean
        return pool[int(np.argmax(value))]

    def _training_set(self) -> tuple[int, list[dict[str, Any]], list[float]]:
        """The fidelity most results have, and the architectures and scores at it (like with like)."""
        counts = collections.Counter(e for _, s in self.data.values() for e in s)
        fidelity = max(counts, key=lambda e: (counts[e], e))
        pairs = [(a, s[fidelity]) for a, s in self.data.values() if fidelity in s]
        return fidelity, [a for a, _ in pairs], [v for _, v in pairs]

    def _encode(self, archs: list[dict[str, Any]]) -> np.ndarray:
        """One-hot of every decision's option, side by side."""
        x = np.zeros((len(archs), int(self._offsets[-1])), dtype=np.float32)
        for row, arch in enumerate(archs):
            x[row, self._offsets[:-1] + np.array(self.space.encode(arch))] = 1.0
        return x

    # -- results ---------------------------------------------------------------------------------
    def tell(self, trial: Trial, result: Result) -> None:
        arch = self.pending.pop(trial.trial_id, None) or dict(trial.arch)
        self._add(arch, result)

    def update(self, trial: Trial, result: Result) -> None:
        """A promoted trial's longer result: its architecture's score at that fidelity."""
        self._add(dict(trial.arch), result)

    def _add(self, arch: dict[str, Any], result: Result) -> None:
        self.told += 1
        key = fingerprint(arch)
        if not result.ok or result.score is None:
            if key not in self.data:
                self.failed.append(key)
            return
        _, scores = self.data.pop(key, (arch, {}))
        self.data[key] = (arch, add(dict(scores), result))  # the most recent last
        if len(self.data) > self.history:
            self._forget()

    def _forget(self) -> None:
        """Drop one result: the oldest of those outside the best half (ranked at the fidelity the ensemble fits)."""
        fidelity = self._training_set()[0]
        ranked = sorted(self.data, key=lambda k: -self.data[k][1].get(fidelity, -np.inf))
        best = set(ranked[:self.history // 2])
        for key in self.data:
            if key not in best:
                del self.data[key]
                return

    def warm_start(self, trial: Trial, result: Result) -> None:
        """A finished trial of an earlier run (:mod:`nas.run.warmstart`): training data for the ensemble, in place
        of one of the random asks."""
        self._add(dict(trial.arch), result)
        if result.ok:
            self.random_asked = min(self.random_asked + 1, self.init)

    def population_size(self) -> int:
        return len(self.data)

    # -- state -----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "data": [[a, to_data(s)] for a, s in self.data.values()],
                "failed": list(self.failed), "pending": dict(self.pending), "random_asked": self.random_asked,
                "told": self.told, "fitted_at": self.fitted_at,
                "model": None if self.model is None else self.model.state_dict(),
                "warmup": None if self.warmup_pool is None else self.warmup_pool.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.data = collections.OrderedDict((fingerprint(a), (dict(a), from_data(s))) for a, s in state["data"])
        self.failed = collections.deque((int(k) for k in state["failed"]), maxlen=self.history // 4)
        self.pending = {int(k): dict(v) for k, v in state["pending"].items()}
        self.random_asked = int(state["random_asked"])
        self.told, self.fitted_at = int(state["told"]), int(state["fitted_at"])
        self.model = None if state["model"] is None else MLPEnsemble(members=self.ensemble).load_state_dict(
            state["model"])
        if self.warmup_pool is not None and state["warmup"] is not None:
            self.warmup_pool.load_state_dict(state["warmup"])
