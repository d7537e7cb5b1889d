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
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nas.core.registry import register_strategy
from nas.core.space import SearchSpace
from nas.core.strategy import Strategy, check_bool
from nas.core.types import Arch, Result, Trial, arch_key

DEDUP_WINDOW = 10_000  # asks remembered for dedup: 80 KB in a snapshot, however long the run
LISTED = 2 * DEDUP_WINDOW  # a space this small has its unseen architectures listed where rejection sampling fails


def fingerprint(arch: Arch) -> int:
    """A 63-bit hash of an architecture (a collision only costs one extra sample)."""
    return int.from_bytes(hashlib.blake2b(arch_key(arch).encode(), digest_size=8).digest(), "little") >> 1


@register_strategy("random")
class RandomSearch(Strategy):
    """Uniform samples from the space. With ``dedup`` (the default) no architecture is proposed twice
    within ``min(space size, 10,000)`` consecutive asks; a space no larger than that is exhausted before
    any repeat, and a new round starts (rejection sampling first; where it finds nothing new, a pick among the
    unseen, listed). Remembering a bounded window instead of every ask keeps the
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
        self._keys: list[int] | None = None  # every architecture's fingerprint, in the space's order (see _unseen)

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
            if key in self._seen:  # near the end of a round: a few unseen left
                arch = self._unseen(arch)
                key = fingerprint(arch)
            if key in self._seen and self._window == self.space.size:  # all seen (two shared a fingerprint)
                self._recent.clear()
                self._seen.clear()
            if key not in self._seen:
                self._seen.add(key)
                self._recent.append(key)
        return self.trial(arch)

    def _unseen(self, arch: dict[str, Any]) -> dict[str, Any]:
        """A uniform pick among the architectures not seen, in a space of at most :data:`LISTED` (else, or where
        all are seen, ``arch``). Rejection sampling that found none ended the round early, so in a round of 3,125
        the first repeat came at ask ~3,052 and 67 architectures were never proposed. The space's fingerprints are
        listed once per strategy (derived, so not in the state); a pick costs one pass over them."""
        if self.space.size > LISTED:  # (with at most DEDUP_WINDOW seen, rejection sampling all but never fails)
            return arch
        if self._keys is None:
            self._keys = [fingerprint(self.space.decode(actions))
                          for actions in itertools.product(*(range(n) for n in self.space.cardinalities))]
        unseen = [i for i, key in enumerate(self._keys) if key not in self._seen]
        if not unseen:
            return arch
        index = unseen[int(self.rng.integers(len(unseen)))]
        return self.space.decode([int(a) for a in np.unravel_index(index, self.space.cardinalities)])

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
