"""A strategy that asks given architectures once each, in order: what retraining a search's picks runs
(:func:`nas.oneshot.retrain`). Not registered: it needs the architectures.

>>> from nas.search_spaces.toy import ToySpace
>>> arch = {"d0": 4, "d1": 3, "d2": 2, "d3": 1, "d4": 1}
>>> s = FixedArchs(ToySpace(), [arch])
>>> s.ask().arch == arch, s.ask()
(True, None)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nas.core.space import SearchSpace
from nas.core.strategy import Strategy
from nas.core.types import Arch, Result, Trial


class FixedArchs(Strategy):
    """A strategy that asks the given architectures once each, in order (what :func:`retrain` runs)."""

    def __init__(self, space: SearchSpace, archs: Sequence[Arch], *, seed: int | None = None) -> None:
        super().__init__(space, seed=seed)
        self.archs = [dict(a) for a in archs]

    def ask(self) -> Trial | None:
        return self.trial(self.archs[self.asked]) if self.asked < len(self.archs) else None

    def tell(self, trial: Trial, result: Result) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        return {"next": self.asked}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._next_id = int(state["next"])


__all__ = ["FixedArchs"]
