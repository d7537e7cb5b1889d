"""Hyperband (Li et al., "Hyperband: A Novel Bandit-Based Approach to Hyperparameter Optimization",
JMLR 2018) as brackets of ASHA, in the asynchronous version of Li et al., MLSys 2020.

With ASHA's rungs ``r_0 < r_1 < ... < r_s = max_epochs``, bracket ``b`` (0 to s_max = s) starts at rung
``r_b``: bracket 0 is ASHA itself, the last bracket trains every trial to ``max_epochs``. Each new trial is
drawn into a bracket by the seeded rng with Hyperband's distribution: bracket b holds, in the paper's
synchronous schedule, ``n = ceil((s_max + 1) / (s + 1) * eta**s)`` configurations with ``s = s_max - b``,
so it is drawn with probability proportional to that n. Within its bracket a trial is judged by ASHA
(stopping or promotion, ``variant``) against the trials of that bracket only.

>>> hb = Hyperband(max_epochs=27, seed=0)
>>> [round(p, 3) for p in hb.bracket_probabilities()]
[0.551, 0.245, 0.122, 0.082]
>>> [b.levels for b in hb.brackets]
[(1, 3, 9, 27), (3, 9, 27), (9, 27), (27,)]
>>> hb.on_report(0, 1, 0.5).value, hb.bracket_of[0]
('CONTINUE', 1)
"""

from __future__ import annotations

import math

import numpy as np

from nas.core.registry import register_scheduler
from nas.schedulers.asha import ASHA, Bracket


def bracket_sizes(num_rungs: int, eta: float) -> list[int]:
    """Hyperband's number of configurations per bracket, most exploratory first (``num_rungs`` rungs
    below and at the maximum; JMLR 2018, Algorithm 1).

    >>> bracket_sizes(4, 3)
    [27, 12, 6, 4]
    """
    s_max = num_rungs - 1
    return [math.ceil((s_max + 1) / (s + 1) * eta**s - 1e-9) for s in range(s_max, -1, -1)]


@register_scheduler("hyperband")
class Hyperband(ASHA):
    """Brackets of ASHA; options as :class:`nas.schedulers.asha.ASHA` (``eta``, ``grace_period``, ``variant``)."""

    def _make_brackets(self) -> list[Bracket]:
        return [Bracket(self.levels[b:], self.eta) for b in range(len(self.levels))]

    def bracket_probabilities(self) -> list[float]:
        sizes = bracket_sizes(len(self.levels), self.eta)
        return [n / sum(sizes) for n in sizes]

    def _on_start(self, trial_id: int) -> None:
        self.bracket_of[trial_id] = int(self.rng.choice(len(self.brackets), p=np.array(self.bracket_probabilities())))


__all__ = ["Hyperband", "bracket_sizes"]
