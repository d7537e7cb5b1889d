"""The strategy interface: a pure, seeded ask/tell object that never sees Ray, threads or clocks."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar, Literal

import numpy as np

from nas.core.space import SearchSpace
from nas.core.types import Arch, Result, Trial, check_seed, python_numbers

MultiObjective = Literal["native", "scalarize", "refuse"]


class Strategy:
    """Base class of every search strategy: a pure, seeded ask/tell object. This docstring lists everything the
    loop and the platform use of a strategy; a new one is one file in ``strategies/`` with a
    ``@register_strategy("name")`` class that implements :meth:`ask` and :meth:`tell`, makes its trials with
    :meth:`trial`, draws every random number from ``self.rng``, and adds its state to :meth:`state_dict`.

    Called by the loop: :meth:`ask` (while a worker is free and the budget allows), :meth:`tell` (once per
    trial, when it first ends: COMPLETE, stopped or paused by a scheduler, or FAILED), :meth:`update` (a
    later, longer result of a trial a scheduler promoted), :meth:`state_dict` / :meth:`load_state_dict`
    (snapshots and resume). Called before the first ask: :meth:`warm_start` (earlier runs' trials). Read
    by the monitors: :meth:`population_size`, :attr:`name`.

    Capabilities, declared as class attributes (never sniffed from signatures or looked up by name):

    - :attr:`multi_objective`: ``"native"`` (it ranks several objectives itself; its constructor takes an
      ``objectives`` keyword), ``"scalarize"`` (the default: on several objectives it runs inside ParEGO's
      random scalarization, :class:`nas.core.scalarize.Scalarized`), or ``"refuse"`` (it cannot; why in
      :attr:`refusal`);
    - :attr:`stops_own_trials`: it decides itself when a trial ends (PBT's segments), so no scheduler
      may stop or pause its trials (why in :attr:`refusal`);
    - :attr:`state_file`: the name of a file in the run directory where it keeps state of its own (Optuna's
      journal storage); it is then constructed with ``storage=`` that file's path.

    All randomness comes from ``self.rng`` (one seeded ``numpy.random.Generator``), whose state is part of
    :meth:`state_dict`, so the same seed gives the same asks, and a restored strategy asks what the
    original would have asked next.
    """

    registered_name: str = ""
    multi_objective: ClassVar[MultiObjective] = "scalarize"
    stops_own_trials: ClassVar[bool] = False
    state_file: ClassVar[str | None] = None
    refusal: ClassVar[str] = ""  # why it refuses several objectives or a scheduler (one clause, for the error line)

    def __init__(self, space: SearchSpace, *, seed: int | None = None) -> None:
        if not isinstance(space, SearchSpace):
            raise TypeError(f"space must be a nas.SearchSpace, got {type(space).__name__}")
        self.space = space
        self.seed = None if seed is None else check_seed(python_numbers(seed))  # (-1, "1": numpy's words)
        self.rng = np.random.default_rng(self.seed)
        self._next_id = 0

    @property
    def name(self) -> str:
        return self.registered_name or type(self).__name__

    @property
    def asked(self) -> int:
        """Trials made so far (the next trial's id)."""
        return self._next_id

    def trial(self, arch: Arch, **fields: Any) -> Trial:
        """A new :class:`Trial` with the next id (the one place ids are made)."""
        trial = Trial(trial_id=self._next_id, arch=dict(arch), strategy=self.name, **fields)
        self._next_id += 1
        return trial

    def ask(self) -> Trial | None:
        """The next trial to run, or None if nothing can be proposed until more results arrive."""
        raise NotImplementedError

    def tell(self, trial: Trial, result: Result) -> None:
        """The result of ``trial`` when it first ends: COMPLETE (trained all its epochs, or stopped or paused
        by a scheduler: ``result.outcome`` says which and ``result.epoch`` how far it got) or FAILED."""
        raise NotImplementedError

    def update(self, trial: Trial, result: Result) -> None:
        """A later result of a trial already told: a paused trial that a scheduler promoted trained further
        (``result.epoch`` is its new, higher fidelity). The default ignores it, so that a strategy never
        compares scores of different fidelities unknowingly; one that ranks by fidelity may take it in."""

    def warm_start(self, trial: Trial, result: Result) -> None:
        """A finished trial of an earlier run (:mod:`nas.run.warmstart`), told before the first ask, with a
        negative id. The default refuses: a strategy learns from earlier runs only where it says how."""
        raise ValueError(f"strategy {self.name!r} cannot be warm-started; drop --warm-start or choose one "
                         f"that can: {', '.join(_warm_startable())}")

    def population_size(self) -> int:
        """Members it holds now (evolution's population, PBT's members); 0 for a strategy without one."""
        return 0

    def checkpoints_needed(self) -> int:
        """How many checkpoints its next trials may start from (PBT: one per member; evolution with inheritance:
        its population); the executor keeps that many more than the trials it holds in flight."""
        return 0

    def expendable(self, kept: Sequence[int]) -> int | None:
        """Of the trials whose checkpoints the executor keeps (``kept``, oldest first), one no trial of it will
        start from, to drop at the executor's bound; None: the oldest goes."""
        return None

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: the base keeps the rng and id counter; subclasses add theirs."""
        return {"rng": self.rng.bit_generator.state, "next_id": self._next_id}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        self._next_id = int(state["next_id"])


def _warm_startable() -> list[str]:
    from nas.core.registry import strategies

    return [n for n, cls in strategies.items() if cls.warm_start is not Strategy.warm_start]


def check_positive_int(name: str, value: Any, *, minimum: int = 1) -> int:
    """``value`` as an int >= ``minimum``, or a ValueError naming it (for constructor options)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_bool(name: str, value: Any) -> bool:
    """``value`` if it is True or False, or a ValueError naming it (``dedup="no"`` was kept, and bool() made it
    True)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be true or false, got {value!r}")
    return bool(value)


def check_fraction(name: str, value: Any, *, low: float = 0.0, high: float = 1.0) -> float:
    """``value`` as a float in [low, high], or a ValueError naming it."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number in [{low}, {high}], got {value!r}") from None
    if not low <= f <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value!r}")
    return f


def check_strategy(strategy: Strategy) -> None:
    """A TypeError, before anything is made, unless the Strategy object handed in can run: its ``__init__`` called
    the base's (an AttributeError on ``rng`` at the first ask otherwise) and its class implements ``ask`` and
    ``tell`` (a bare NotImplementedError after the first trial otherwise); a ValueError where it has proposed trials
    already (an object handed to a second search)."""
    name = type(strategy).__name__
    if not all(hasattr(strategy, attr) for attr in ("space", "rng", "_next_id")):
        raise TypeError(f"strategy {name} was not set up as a nas.Strategy: its __init__ must call "
                        "super().__init__(space, seed=seed)")
    missing = [m for m in ("ask", "tell") if getattr(type(strategy), m) is getattr(Strategy, m)]
    if missing:
        raise TypeError(f"strategy {name} does not implement {' and '.join(missing)}: a strategy implements "
                        "ask() -> Trial | None and tell(trial, result)")
    if strategy._next_id != 0:  # (its state went on: ids from 4, other proposals than the seed's, in a new run)
        raise ValueError(f"strategy {name} has proposed {strategy._next_id} trials already (in an earlier search): "
                         f"a search starts from a strategy that has proposed none; make a new one")


def check_asked(trial: object, strategy: str) -> None:
    """A TypeError or ValueError naming ``strategy`` unless what its :meth:`Strategy.ask` returned is a Trial the
    loop can run (a dict asked was an AttributeError on ``trial_id`` in the loop; ``epochs=-3`` trained nothing and
    ended COMPLETE).

    >>> check_asked({"d0": 1}, "mine")
    Traceback (most recent call last):
    ...
    TypeError: strategy 'mine' asked dict {'d0': 1}, not a Trial (make one with self.trial(arch))
    """
    if not isinstance(trial, Trial):
        raise TypeError(f"strategy {strategy!r} asked {type(trial).__name__} {trial!r:.80}, not a Trial (make one "
                        "with self.trial(arch))")
    if isinstance(trial.trial_id, bool) or not isinstance(trial.trial_id, int) or trial.trial_id < 0:
        raise ValueError(f"strategy {strategy!r} asked a trial with id {trial.trial_id!r}; allowed: an integer >= 0 "
                         "(self.trial(arch) numbers them)")
    epochs = trial.epochs
    if epochs is not None and (isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1):
        raise ValueError(f"strategy {strategy!r} asked trial {trial.trial_id} with epochs={epochs!r}; allowed: None "
                         "(the run's epochs) or an integer >= 1")


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
