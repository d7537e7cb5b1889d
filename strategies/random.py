"""Random search (Bergstra & Bengio 2012): the baseline every other strategy must beat.

>>> from nas.search_spaces.toy import ToySpace
>>> s = RandomSearch(ToySpace(), seed=0)
>>> t = s.ask()
>>> t.trial_id, sorted(t.arch) == sorted(ToySpace().decisions)
(0, True)
"""

from __future__ import annotations

import collections
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nas.core.registry import register_strategy
from nas.core.space import SearchSpace
from nas.core.strategy import Strategy, check_bool
from nas.core.types import Arch, Result, Trial, arch_key

DEDUP_WINDOW = 10_000  # asks remembered for dedup: 80 KB in a snapshot, however long the run


def fingerprint(arch: Arch) -> int:
    """A 63-bit hash of an architecture (a collision only costs one extra sample)."""
    return int.from_bytes(hashlib.blake2b(arch_key(arch).encode(), digest_size=8).digest(), "little") >> 1


@register_strategy("random")
class RandomSearch(Strategy):
    """Uniform samples from the space. With ``dedup`` (the default) no architecture is proposed twice
    within ``min(space size, 10,000)`` consecutive asks; a space no larger than that is exhausted before
    any repeat, and a new round starts. Remembering a bounded window instead of every ask keeps the
    snapshot O(1) in the run's length; in a larger space a repeat beyond the window is as likely as in
    uniform sampling without any dedup."""

    multi_objective = "native"  # its asks never depend on scores: several objectives change nothing

    def __init__(self, space: SearchSpace, *, seed: int | None = None, dedup: bool = True,
                 objectives: Sequence[str] | None = None) -> None:
        super().__init__(space, seed=seed)  # (objectives: accepted as every native strategy's; never used)
        self.dedup = check_bool("dedup", dedup)
        self._window = min(space.size, DEDUP_WINDOW)
        self._recent: collections.deque[int] = collections.deque()  # fingerprints, oldest on the left
        self._seen: set[int] = set()  # the same fingerprints, for lookup

    def ask(self) -> Trial:
        arch = self.space.sample(self.rng)
        if self.dedup:
            if len(self._recent) >= self._window:
                if self._window == self.space.size:  # the space is exhausted: a new round
                    self._recent.clear()
                    self._seen.clear()
                else:
                    self._seen.discard(self._recent.popleft())
            for _ in range(100):  # rejection sampling; cheap while the space is far from exhausted
                if fingerprint(arch) not in self._seen:
                    break
                arch = self.space.sample(self.rng)
            key = fingerprint(arch)
            if key in self._seen and self._window == self.space.size:  # the round is as good as exhausted
                self._recent.clear()
                self._seen.clear()
            if key not in self._seen:
                self._seen.add(key)
                self._recent.append(key)
        return self.trial(arch)

    def tell(self, trial: Trial, result: Result) -> None:
        pass

    def warm_start(self, trial: Trial, result: Result) -> None:
        """A finished trial of an earlier run (:mod:`nas.run.warmstart`): with dedup, its architecture is not
        proposed again (while the window has room); random search learns nothing else from it."""
        key = fingerprint(trial.arch)
        if self.dedup and key not in self._seen and len(self._recent) < self._window:
            self._seen.add(key)
            self._recent.append(key)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "recent": np.array(self._recent, dtype=np.int64)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self._recent = collections.deque(int(k) for k in np.asarray(state["recent"]).tolist())
        self._seen = set(self._recent)
