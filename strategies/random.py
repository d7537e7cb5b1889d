"""Random search (Bergstra & Bengio 2012): the baseline every other strategy must beat.

>>> from nas.search_spaces.toy import ToySpace
>>> s = RandomSearch(ToySpace(), seed=0)
>>> t = s.ask()
>>> t.trial_id, sorted(t.arch) == sorted(ToySpace().decisions)
(0, True)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nas.registry import register_strategy
from nas.space import SearchSpace
from nas.strategy import Strategy
from nas.types import Result, Trial, arch_key


@register_strategy("random")
class RandomSearch(Strategy):
    """Uniform samples from the space. With ``dedup`` (the default) no architecture is proposed twice
    until the space is exhausted, after which repeats are allowed again."""

    def __init__(self, space: SearchSpace, *, seed: int | None = None, dedup: bool = True) -> None:
        super().__init__(space, seed=seed)
        self.dedup = bool(dedup)
        self._seen: set[str] = set()

    def ask(self) -> Trial:
        arch = self.space.sample(self.rng)
        if self.dedup:
            if len(self._seen) >= self.space.size:
                self._seen.clear()
            for _ in range(100):  # rejection sampling; cheap while the space is far from exhausted
                if arch_key(arch) not in self._seen:
                    break
                arch = self.space.sample(self.rng)
            self._seen.add(arch_key(arch))
        return self.trial(arch)

    def tell(self, trial: Trial, result: Result) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "seen": list(self._seen)}  # back into a set: order is irrelevant

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self._seen = set(state["seen"])
