"""The strategy interface: a pure, seeded ask/tell object that never sees Ray, threads or clocks."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from nas.core.space import SearchSpace
from nas.core.types import Arch, Decision, Result, Trial


class Strategy:
    """Base class. Subclasses implement :meth:`ask` and :meth:`tell`.

    All randomness comes from ``self.rng`` (one seeded ``numpy.random.Generator``), whose state is part
    of :meth:`state_dict`, so the same seed gives the same asks, and a restored strategy asks what the
    original would have asked next.
    """

    registered_name: str = ""

    def __init__(self, space: SearchSpace, *, seed: int | None = None) -> None:
        if not isinstance(space, SearchSpace):
            raise TypeError(f"space must be a nas.SearchSpace, got {type(space).__name__}")
        self.space = space
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self._next_id = 0

    @property
    def name(self) -> str:
        return self.registered_name or type(self).__name__

    def trial(self, arch: Arch, **fields: Any) -> Trial:
        """A new :class:`Trial` with the next id (the one place ids are made)."""
        trial = Trial(trial_id=self._next_id, arch=dict(arch), strategy=self.name, **fields)
        self._next_id += 1
        return trial

    def ask(self) -> Trial | None:
        """The next trial to run, or None if nothing can be proposed until more results arrive."""
        raise NotImplementedError

    def tell(self, trial: Trial, result: Result) -> None:
        """The final result of ``trial`` (COMPLETE with a score, or FAILED)."""
        raise NotImplementedError

    def update(self, trial: Trial, result: Result) -> None:
        """A newer result of a trial already told: a paused trial that a scheduler promoted trained further
        (its result at a higher rung). The default ignores it; a strategy that ranks what it was told may
        take it in."""

    def report(self, trial: Trial, result: Result) -> Decision:
        """An intermediate result of a running trial. The default lets every trial run on."""
        return Decision.CONTINUE

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: the base keeps the rng and id counter; subclasses add theirs."""
        return {"rng": self.rng.bit_generator.state, "next_id": self._next_id}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        self._next_id = int(state["next_id"])


def check_positive_int(name: str, value: Any, *, minimum: int = 1) -> int:
    """``value`` as an int >= ``minimum``, or a ValueError naming it (for constructor options)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_fraction(name: str, value: Any, *, low: float = 0.0, high: float = 1.0) -> float:
    """``value`` as a float in [low, high], or a ValueError naming it."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number in [{low}, {high}], got {value!r}") from None
    if not low <= f <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value!r}")
    return f


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """Run a strategy's small torch computations (an RL controller, a GP fit) on one CPU thread, then
    restore torch's setting. Where the cores are busy training, as in a search, tiny ops on two
    threads ran 10-100x slower (a batch-10 LSTM step: 90 ms instead of 1 ms) from thread synchronisation.
    """
    import torch

    n = torch.get_num_threads()
    if n == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)
