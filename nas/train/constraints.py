"""Constraints on a candidate's measured costs (parameters, FLOPs, latency): a candidate over one is INFEASIBLE, a
typed failure recorded before anything is trained. Plain Python: checking needs no torch (measuring does:
:mod:`nas.train.costs`).

>>> Constraints(max_params=1e6).check({"params": 2e6, "flops": 1.0, "latency_ms": 1.0}).name
'max_params'

A zero-cost proxy is a constraint too (``proxy_screen``, checked by :class:`nas.train.proxies.screened` on the
worker, after the costs and before training): a candidate scoring below the minimum is INFEASIBLE.

>>> parse_screen("synflow:1e10")
('synflow', 10000000000.0)
>>> parse_screen("flops:3")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: proxy_screen must be PROXY:MIN with PROXY one of synflow, snip, ...; got 'flops:3'
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from nas.core.types import FailureKind


@dataclasses.dataclass(frozen=True)
class Violation:
    """A broken constraint: ``metric`` measured ``value``, above ``limit`` (the option ``name``)."""

    name: str
    metric: str
    value: float
    limit: float
    kind: FailureKind = FailureKind.INFEASIBLE

    def __str__(self) -> str:
        return f"{self.metric} {self.value:g} > {self.name} {self.limit:g}"


#: the zero-cost proxies (:mod:`nas.train.proxies`, which needs torch; these names do not)
PROXY_NAMES = ("synflow", "snip", "grad_norm", "jacob_cov", "naswot", "params")

#: constraint option -> the cost it bounds
LIMITS = {"max_params": "params", "max_flops": "flops", "max_latency_ms": "latency_ms"}


@dataclasses.dataclass(frozen=True)
class Constraints:
    """Upper bounds on a candidate's costs; None = no bound. Each a positive number.

    >>> Constraints(max_latency_ms=0)
    Traceback (most recent call last):
    ...
    ValueError: max_latency_ms must be a positive number, got 0
    """

    max_params: float | None = None
    max_flops: float | None = None
    max_latency_ms: float | None = None

    def __post_init__(self) -> None:
        for name in LIMITS:
            value = getattr(self, name)
            if value is None:
                continue
            ok = not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value) and value > 0
            if not ok:
                raise ValueError(f"{name} must be a positive number, got {value!r}")

    @property
    def active(self) -> bool:
        return any(getattr(self, name) is not None for name in LIMITS)

    def check(self, costs: Mapping[str, Any]) -> Violation | None:
        """The first broken bound (params, then FLOPs, then latency at batch 1), or None."""
        for name, metric in LIMITS.items():
            limit = getattr(self, name)
            if limit is not None and costs[metric] > limit:
                return Violation(name, metric, float(costs[metric]), float(limit))
        return None


def parse_screen(text: str) -> tuple[str, float]:
    """``PROXY:MIN`` (the ``proxy_screen`` setting) as (proxy, minimum), or a ValueError naming it."""
    proxy, _, minimum = str(text).partition(":")
    try:
        value = float(minimum)
    except ValueError:
        value = math.nan
    if proxy not in PROXY_NAMES or math.isnan(value):
        raise ValueError(f"proxy_screen must be PROXY:MIN with PROXY one of {', '.join(PROXY_NAMES)}; got {text!r}")
    return proxy, value


__all__ = ["LIMITS", "PROXY_NAMES", "Constraints", "Violation", "parse_screen"]
