"""Optuna's samplers as a strategy: TPE (default), random, CMA-ES or GP, through optuna's ask/tell.

TPE: Bergstra et al. 2011, "Algorithms for Hyper-Parameter Optimization" (with Optuna's constant liar
for trials in flight: running trials count as bad, so parallel asks spread out); CMA-ES: Hansen 2016,
"The CMA Evolution Strategy: A Tutorial"; Optuna: Akiba et al. 2019.

Each decision of the space becomes one Optuna parameter of the same name:

- a decision whose options are all numbers in increasing order (``depth`` 1/2/3, ``width`` 16/32/64)
  becomes an ``IntDistribution`` over the option index, so samplers that model order (TPE's Parzen
  estimators, CMA-ES) can use it;
- any other decision becomes a ``CategoricalDistribution`` over its option indices.

CMA-ES models only the ordered decisions; Optuna hands the categorical ones to its independent
sampler (random, seeded), and a space without any ordered decision is refused with a ValueError.
Each ask is ``study.ask(distributions)``; each tell is ``study.tell(value)``, or ``state=FAIL`` for a
failed trial. The whole study (with its sampler's random state) is pickled in :meth:`state_dict`.

>>> from nas.search_spaces.toy import ToySpace, toy_score
>>> from nas.types import Result, TrialState
>>> s = OptunaStrategy(ToySpace(), sampler="tpe", seed=0)
>>> for _ in range(30):
...     t = s.ask()
...     s.tell(t, Result(t.trial_id, TrialState.COMPLETE, score=toy_score(t.arch)))
>>> len(s.study.trials), s.study.best_value > -5
(30, True)
"""

from __future__ import annotations

import numbers
import pickle
from collections.abc import Mapping
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.trial import TrialState as OptunaState

from nas.registry import register_strategy
from nas.space import SearchSpace
from nas.strategy import Strategy, one_torch_thread
from nas.types import Result, Trial

SAMPLERS = ("tpe", "random", "cmaes", "gp")


def is_ordered(options: tuple[Any, ...]) -> bool:
    """Options that are all (non-bool) numbers in strictly increasing order."""
    nums = all(isinstance(o, numbers.Real) and not isinstance(o, bool) for o in options)
    return nums and len(options) > 1 and all(a < b for a, b in zip(options, options[1:]))


def distributions(space: SearchSpace) -> dict[str, BaseDistribution]:
    """One Optuna distribution over option indices per decision (see the module docstring)."""
    return {
        name: IntDistribution(0, len(opts) - 1) if is_ordered(opts)
        else CategoricalDistribution(list(range(len(opts))))
        for name, opts in space.decisions.items()
    }


def make_sampler(name: str, seed: int | None, space: SearchSpace, startup: int = 10
                 ) -> optuna.samplers.BaseSampler:
    """A seeded sampler by name; ``startup`` random trials come before a model-based one's own."""
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, constant_liar=True,
                                          multivariate=True)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "cmaes":
        if not any(is_ordered(o) for o in space.decisions.values()):
            raise ValueError(f"sampler 'cmaes' needs decisions with ordered numeric options; "
                             f"{type(space).__name__} has none (use 'tpe', 'random' or 'gp')")
        try:
            import cmaes  # noqa: F401
        except ImportError:
            raise ValueError("sampler 'cmaes' needs the cmaes package: pip install cmaes") from None
        return optuna.samplers.CmaEsSampler(
            seed=seed, n_startup_trials=startup, warn_independent_sampling=False,
            independent_sampler=optuna.samplers.RandomSampler(seed=seed))
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=startup, warn_independent_sampling=False)
    raise ValueError(f"unknown sampler {name!r}; allowed: {', '.join(SAMPLERS)}")


@register_strategy("optuna")
class OptunaStrategy(Strategy):
    """Options: ``sampler`` (one of tpe, random, cmaes, gp; default tpe), ``startup`` (random trials
    before the model-based samplers take over; default 10)."""

    def __init__(self, space: SearchSpace, *, seed: int | None = None, sampler: str = "tpe",
                 startup: int = 10) -> None:
        super().__init__(space, seed=seed)
        if isinstance(startup, bool) or not isinstance(startup, int) or startup < 0:
            raise ValueError(f"startup must be an integer >= 0, got {startup!r}")
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        sampler_seed = int(self.rng.integers(2**31 - 1))
        smp = make_sampler(sampler, sampler_seed, space, startup)
        self.sampler_name = sampler
        self.distributions = distributions(space)
        self.study = optuna.create_study(direction="maximize", sampler=smp)
        self.pending: dict[int, int] = {}  # our trial id -> optuna trial number

    def ask(self) -> Trial:
        with one_torch_thread():  # the GP sampler fits its model with torch
            ot = self.study.ask(self.distributions)
        arch = {name: opts[int(ot.params[name])] for name, opts in self.space.decisions.items()}
        trial = self.trial(arch)
        self.pending[trial.trial_id] = ot.number
        return trial

    def tell(self, trial: Trial, result: Result) -> None:
        number = self.pending.pop(trial.trial_id, None)
        if number is None:
            return
        if result.ok and result.score is not None:
            self.study.tell(number, float(result.score))
        else:
            self.study.tell(number, state=OptunaState.FAIL)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "study": pickle.dumps(self.study), "pending": dict(self.pending)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.study = pickle.loads(state["study"])
        self.pending = {int(k): int(v) for k, v in state["pending"].items()}
