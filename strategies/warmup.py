"""A zero-cost-proxy warm-up for a strategy (``-o warmup=PROXY:M:K``), as Mellor et al. 2021 ("Neural Architecture
Search without Training", ICML, section 5: "Assisted Regularised EA", AREA) seed evolution: score M random
candidates with a proxy at initialisation (no training), and start the search from the top K.

The strategy stays pure: it draws its M candidates from its own generator, and whoever runs the search scores them
(:func:`nas.train.proxies.score_archs` on a worker's device, or a precomputed table in the benchmarks) and hands
the scores back before the first ask; the strategy keeps only the K best, in order (its state stays O(K)).

>>> from nas.search_spaces.toy import ToySpace
>>> import numpy as np
>>> w = Warmup.parse("params:50:3")
>>> w
Warmup(proxy='params', candidates=50, keep=3)
>>> pool = WarmupPool(w)
>>> archs = pool.candidates(ToySpace(), np.random.default_rng(0))
>>> pool.answer([a["d0"] + a["d1"] for a in archs])
>>> [a["d0"] + a["d1"] for a in pool.take(3)]
[8, 8, 7]
>>> Warmup.parse("synflow:10")
Traceback (most recent call last):
...
ValueError: warmup must be PROXY:M:K (M candidates scored by the proxy, the top K kept; e.g. synflow:3000:64), ...
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from nas.core.scalarize import Scalarized
from nas.core.space import SearchSpace
from nas.core.types import Arch

#: the proxies :mod:`nas.train.proxies` computes (kept here too, so that a strategy checks a name without torch)
PROXY_NAMES = ("synflow", "snip", "grad_norm", "jacob_cov", "naswot", "params")


@dataclasses.dataclass(frozen=True)
class Warmup:
    """``proxy``: a name of :data:`PROXY_NAMES`; ``candidates``: M random architectures it scores; ``keep``: the
    top K the search starts from."""

    proxy: str
    candidates: int
    keep: int

    @classmethod
    def parse(cls, text: Any) -> Warmup:
        usage = "warmup must be PROXY:M:K (M candidates scored by the proxy, the top K kept; e.g. synflow:3000:64)"
        parts = str(text).split(":") if isinstance(text, str) else []
        if len(parts) != 3:
            raise ValueError(f"{usage}, got {text!r}")
        proxy, m, k = parts
        if proxy not in PROXY_NAMES:
            raise ValueError(f"warmup proxy must be one of {', '.join(PROXY_NAMES)}; got {proxy!r}")
        try:
            candidates, keep = int(m), int(k)
        except ValueError:
            raise ValueError(f"{usage}, got {text!r}") from None
        if not 1 <= keep <= candidates:
            raise ValueError(f"warmup needs 1 <= K <= M, got M={candidates}, K={keep}")
        return cls(proxy, candidates, keep)

    def __str__(self) -> str:
        return f"{self.proxy}:{self.candidates}:{self.keep}"


class WarmupPool:
    """The warm-up of one strategy: :meth:`candidates` (drawn once), :meth:`answer` (their proxy scores), then
    :meth:`take` the best not yet taken, in order."""

    def __init__(self, warmup: Warmup) -> None:
        self.warmup = warmup
        self._drawn: list[dict[str, Any]] | None = None
        self.answered = False
        self.ranked: list[dict[str, Any]] = []  # the top K not yet taken, best first

    def candidates(self, space: SearchSpace, rng: np.random.Generator) -> list[dict[str, Any]]:
        """The M candidates to score, drawn from the strategy's generator the first time (the same list after)."""
        if self._drawn is None:
            self._drawn = [space.sample(rng) for _ in range(self.warmup.candidates)]
        return list(self._drawn)

    def answer(self, scores: Sequence[float | None]) -> None:
        """The proxy's score of each candidate, in order (None or NaN: it failed to score, and ranks last)."""
        if self._drawn is None:
            raise ValueError("warm-up scores came before the candidates were drawn (call candidates() first)")
        if len(scores) != len(self._drawn):
            raise ValueError(f"warm-up got {len(scores)} scores for {len(self._drawn)} candidates")
        keys = [-math.inf if s is None or not math.isfinite(float(s)) else float(s) for s in scores]
        order = sorted(range(len(keys)), key=lambda i: -keys[i])  # stable: ties keep the draw order
        self.ranked = [self._drawn[i] for i in order[:self.warmup.keep]]
        self._drawn, self.answered = None, True

    def take(self, n: int = 1) -> list[dict[str, Any]]:
        """Up to ``n`` of the ranked candidates (best first), removed from the pool; a ValueError if the
        candidates were never scored."""
        if not self.answered:
            raise ValueError(f"warmup={self.warmup} needs its {self.warmup.candidates} candidates scored before the "
                             "first ask (nas.strategies.warmup.warm_up(strategy, score))")
        out, self.ranked = self.ranked[:n], self.ranked[n:]
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"answered": self.answered, "ranked": [dict(a) for a in self.ranked]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.answered = bool(state["answered"])
        self.ranked = [dict(a) for a in state["ranked"]]
        self._drawn = None


class ProxyWarmup:
    """What a strategy with a ``warmup`` option offers whoever runs it: :meth:`warmup_candidates` to score, and
    :meth:`warmup_scores` back (before its first ask). ``self.warmup_pool`` is None without a warm-up."""

    warmup_pool: WarmupPool | None = None
    space: SearchSpace
    rng: np.random.Generator

    @property
    def warmup(self) -> Warmup | None:
        return None if self.warmup_pool is None else self.warmup_pool.warmup

    def warmup_candidates(self) -> list[Arch]:
        if self.warmup_pool is None:
            return []
        return list(self.warmup_pool.candidates(self.space, self.rng))

    def warmup_scores(self, scores: Sequence[float | None]) -> None:
        if self.warmup_pool is not None:
            self.warmup_pool.answer(scores)


def pending(strategy: Any) -> Warmup | None:
    """The warm-up ``strategy`` still waits to have scored before its first ask (None: none, or answered; a strategy
    inside ParEGO's scalarization is reached through it)."""
    inner = getattr(strategy, "inner", None) if isinstance(strategy, Scalarized) else strategy
    if not isinstance(inner, ProxyWarmup) or inner.warmup_pool is None or inner.warmup_pool.answered:
        return None
    return inner.warmup


def warm_up(strategy: Any, score: Callable[[list[Arch]], Sequence[float | None]]) -> bool:
    """Answer a strategy's warm-up before its first ask: ``score`` is handed its candidates and returns their proxy
    values (e.g. a column of :func:`nas.train.proxies.score_archs`, or a table's). True if there was one to answer
    (a strategy inside ParEGO's scalarization is reached through it)."""
    inner = getattr(strategy, "inner", None) if isinstance(strategy, Scalarized) else strategy
    if not isinstance(inner, ProxyWarmup) or inner.warmup is None:
        return False
    inner.warmup_scores(list(score(inner.warmup_candidates())))
    return True


def make_pool(warmup: str | Warmup | None) -> WarmupPool | None:
    """The pool of a strategy's ``warmup`` option (None: no warm-up)."""
    if warmup is None:
        return None
    return WarmupPool(warmup if isinstance(warmup, Warmup) else Warmup.parse(warmup))
