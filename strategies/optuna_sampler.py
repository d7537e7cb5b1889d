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
failed trial.

Several ``objectives`` (the run's "metric:mode" specs): a multi-objective study (every direction
"maximize": scores are higher-is-better), told each result's ``scores``, with the samplers that can
rank several objectives: NSGA-II (Deb et al. 2002), NSGA-III (Deb & Jain 2014), TPE (Ozaki et al. 2020,
"Multiobjective Tree-Structured Parzen Estimator"), GP (log expected hypervolume improvement) and
random. Infeasible candidates (``Result.failure`` INFEASIBLE: a constraint broke, nothing trained)
reach Optuna as constraint violations, through ``Trial.set_constraint`` (Optuna 5's successor of the
samplers' ``constraints_func``; a system attribute, kept in the journal): every told trial gets the
constraint ``nas_violation``, 0.0 if feasible, 1.0 if not, so NSGA-II's constrained domination and
TPE's and GP's constrained acquisitions steer away from infeasible ones. An infeasible trial is told
the worst value of each objective among the feasible ones (Optuna needs values; it never enters
``study.best_trials``, which keeps feasible trials only), or FAIL while none has completed.

State, as data (never a pickle; see :mod:`nas.strategies.optuna_storage`): with ``storage`` (a file path) the
study lives in Optuna's own append-only journal file (``JournalStorage`` over a
:class:`~nas.strategies.optuna_storage.SnapshotJournalBackend`: one fsync per snapshot, not ten per trial; O(1) per
trial), and :meth:`state_dict` holds only the trials in flight (our id -> Optuna number), the
sampler's random state and the journal's length; :meth:`load_state_dict` cuts the journal back to that
length (the asks and tells made after the snapshot are undone, as for every other strategy, whose state
is the snapshot) and reopens the study, so the restored strategy asks exactly what the original asked
next. Without ``storage`` the study is in memory and :meth:`state_dict` carries its trials as arrays.

>>> from nas.search_spaces.toy import ToySpace, toy_score
>>> from nas.core.types import Result, TrialState
>>> s = OptunaStrategy(ToySpace(), sampler="tpe", seed=0)
>>> for _ in range(30):
...     t = s.ask()
...     s.tell(t, Result(t.trial_id, TrialState.COMPLETE, score=toy_score(t.arch)))
>>> len(s.study.trials), s.study.best_value > -5
(30, True)

With a journal storage, a snapshot, more asks, a crash, and a resume that asks the same again:

>>> import pathlib, tempfile
>>> from nas.run.snapshot import read_snapshot, write_snapshot
>>> run = pathlib.Path(tempfile.mkdtemp())
>>> s = OptunaStrategy(ToySpace(), seed=0, storage=run / "optuna.journal")
>>> for _ in range(12):
...     t = s.ask()
...     s.tell(t, Result(t.trial_id, TrialState.COMPLETE, score=toy_score(t.arch)))
>>> write_snapshot(run / "strategy.json", s.state_dict()) < 8000   # not the study: it is in the journal
True
>>> lost = [s.ask().arch for _ in range(3)]                         # then the driver dies
>>> again = OptunaStrategy(ToySpace(), seed=0, storage=run / "optuna.journal")
>>> again.load_state_dict(read_snapshot(run / "strategy.json"))
>>> [again.ask().arch for _ in range(3)] == lost
True
"""

from __future__ import annotations

import numbers
import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.storages import JournalStorage
from optuna.study import StudyDirection
from optuna.trial import TrialState as OptunaState

from nas.core.objectives import Objectives
from nas.core.registry import register_strategy
from nas.core.space import SearchSpace
from nas.core.strategy import Strategy, check_positive_int, one_torch_thread
from nas.core.types import FailureKind, Result, Trial
from nas.strategies.optuna_storage import (
    DataCmaEsSampler,
    SnapshotJournalBackend,
    check_journal,
    load_sampler,
    load_trials,
    sampler_state,
    trials_state,
)

SAMPLERS = ("tpe", "random", "cmaes", "gp")
MO_SAMPLERS = ("nsga2", "nsga3", "tpe", "gp", "random")  # the ones that rank several objectives
VIOLATION = "nas_violation"  # the constraint every multi-objective trial gets: > 0 means a constraint broke
STUDY_NAME = "nas"


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


def make_mo_sampler(name: str, seed: int | None, startup: int = 10, population: int = 50
                    ) -> optuna.samplers.BaseSampler:
    """A seeded multi-objective sampler by name (they read constraints from the trials)."""
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(population_size=population, seed=seed)
    if name == "nsga3":
        with warnings.catch_warnings():  # "experimental since v3.2.0"
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.NSGAIIISampler(population_size=population, seed=seed)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, constant_liar=True,
                                          multivariate=True)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=startup, warn_independent_sampling=False)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise ValueError(f"sampler {name!r} cannot search several objectives; allowed with several: "
                     f"{', '.join(MO_SAMPLERS)}")


def make_sampler(name: str, seed: int | None, space: SearchSpace, startup: int = 10
                 ) -> optuna.samplers.BaseSampler:
    """A seeded sampler by name; ``startup`` random trials come before a model-based one's own."""
    if name in ("nsga2", "nsga3"):
        raise ValueError(f"sampler {name!r} is for several objectives (--objective twice or more); with one "
                         f"objective use one of {', '.join(SAMPLERS)}")
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
        return DataCmaEsSampler(  # Optuna's CmaEsSampler, keeping its optimizer as data, not a pickle
            seed=seed, n_startup_trials=startup, warn_independent_sampling=False,
            independent_sampler=optuna.samplers.RandomSampler(seed=seed))
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=startup, warn_independent_sampling=False)
    raise ValueError(f"unknown sampler {name!r}; allowed: {', '.join(SAMPLERS)}")


@register_strategy("optuna")
class OptunaStrategy(Strategy):
    """Options: ``sampler`` (one of tpe, random, cmaes, gp; with several objectives nsga2, nsga3, tpe, gp
    or random; default tpe), ``startup`` (random trials before the model-based samplers take over; default
    10), ``storage`` (a journal file for the study; default None: in memory), ``population`` (NSGA-II's
    and NSGA-III's generation size; default 50)."""

    multi_objective = "native"
    state_file = "optuna.journal"  # its study, in Optuna's own journal storage: data, never a pickle

    def __init__(self, space: SearchSpace, *, seed: int | None = None, sampler: str = "tpe",
                 startup: int = 10, storage: str | os.PathLike[str] | None = None,
                 objectives: Sequence[str] | None = None, population: int = 50) -> None:
        super().__init__(space, seed=seed)
        self.objectives = Objectives(objectives) if objectives is not None else None
        self.n_objectives = len(self.objectives) if self.objectives is not None else 1
        self.population = check_positive_int("population", population, minimum=2)
        if isinstance(startup, bool) or not isinstance(startup, int) or startup < 0:
            raise ValueError(f"startup must be an integer >= 0, got {startup!r}")
        if storage is not None and not isinstance(storage, (str, os.PathLike)):
            raise ValueError(f"storage must be a file path or None, got {storage!r}")
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        sampler_seed = int(self.rng.integers(2**31 - 1))
        smp = self._sampler(sampler, sampler_seed, space, startup)
        self.sampler_name, self.startup = sampler, startup
        self.storage_path = None if storage is None else os.fspath(storage)
        self.distributions = distributions(space)
        self._backend: SnapshotJournalBackend | None = None
        self.study = self._open(smp)
        self.pending: dict[int, int] = {}  # our trial id -> optuna trial number

    def _sampler(self, name: str, seed: int | None, space: SearchSpace, startup: int
                 ) -> optuna.samplers.BaseSampler:
        if self.n_objectives > 1:
            return make_mo_sampler(name, seed, startup, self.population)
        return make_sampler(name, seed, space, startup)

    def _open(self, smp: optuna.samplers.BaseSampler) -> optuna.Study:
        directions = [StudyDirection.MAXIMIZE] * self.n_objectives  # scores are higher-is-better
        if self.storage_path is None:
            return optuna.create_study(directions=directions, sampler=smp)
        check_journal(self.storage_path)
        self._backend = SnapshotJournalBackend(self.storage_path)
        storage = JournalStorage(self._backend)
        if any(s.study_name == STUDY_NAME for s in storage.get_all_studies()):  # load_if_exists would log
            return optuna.load_study(study_name=STUDY_NAME, storage=storage, sampler=smp)  # a failed create
        return optuna.create_study(directions=directions, sampler=smp, storage=storage, study_name=STUDY_NAME)

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
        if self.n_objectives > 1:
            self._tell_many(number, result)
        elif result.ok and result.score is not None:
            self.study.tell(number, float(result.score), skip_if_finished=True)
        else:
            self.study.tell(number, state=OptunaState.FAIL, skip_if_finished=True)

    def _tell_many(self, number: int, result: Result) -> None:
        """A multi-objective tell: the scores; an infeasible trial as a constraint violation (module docstring)."""
        if result.ok:
            scores = result.scores if result.scores is not None else [result.score]
            values = [float(v) for v in scores if v is not None]
            if len(values) != self.n_objectives:
                raise ValueError(f"trial {result.trial_id}'s result has scores {scores}; this study has "
                                 f"{self.n_objectives} objectives")
            self._constraint(number, 0.0)
            self.study.tell(number, values, skip_if_finished=True)
            return
        done = self.study.get_trials(deepcopy=False, states=(OptunaState.COMPLETE,))
        feasible = [t.values for t in done if all(c <= 0 for c in t.constraints.values())]
        if result.failure is not FailureKind.INFEASIBLE or not feasible:
            self.study.tell(number, state=OptunaState.FAIL, skip_if_finished=True)
            return
        self._constraint(number, 1.0)
        self.study.tell(number, np.min(feasible, axis=0).tolist(), skip_if_finished=True)

    def _constraint(self, number: int, value: float) -> None:
        trial_id = self.study._storage.get_trial_id_from_study_id_trial_number(self.study._study_id, number)
        optuna.Trial(self.study, trial_id).set_constraint(VIOLATION, value)

    def warm_start(self, trial: Trial, result: Result) -> None:
        """A finished trial of an earlier run (:mod:`nas.run.warmstart`), added to the study as a finished
        Optuna trial (``study.add_trial``), which the samplers learn from as from their own."""
        params = {name: opts.index(trial.arch[name]) for name, opts in self.space.decisions.items()}
        if result.ok and result.score is not None and self.n_objectives > 1:
            values = [float(v) for v in (result.scores or [result.score])]
            ft = optuna.trial.create_trial(params=params, distributions=self.distributions, values=values)
        elif result.ok and result.score is not None:
            ft = optuna.trial.create_trial(params=params, distributions=self.distributions, value=float(result.score))
        else:
            ft = optuna.trial.create_trial(params=params, distributions=self.distributions, state=OptunaState.FAIL)
        self.study.add_trial(ft)

    def state_dict(self) -> dict[str, Any]:
        state = {**super().state_dict(), "sampler": self.sampler_name, "pending": dict(self.pending),
                 "sampler_state": sampler_state(self.study.sampler)}
        if self._backend is None:
            state["trials"] = trials_state(self.study, self.distributions)
        else:  # the journal, synced now, holds the study: its length is the study's state
            state["journal_bytes"] = self._backend.sync()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("sampler") != self.sampler_name:
            raise ValueError(f"the snapshot is of sampler {state.get('sampler')!r}, this strategy uses "
                             f"{self.sampler_name!r}")
        if ("trials" in state) != (self.storage_path is None):
            raise ValueError("the snapshot's optuna study is " + ("in memory" if "trials" in state else
                             "in a journal storage") + f", this strategy's storage is {self.storage_path!r}")
        super().load_state_dict(state)
        smp = self._sampler(self.sampler_name, 0, self.space, self.startup)  # fresh caches; the rng is loaded
        load_sampler(smp, state["sampler_state"])
        if self.storage_path is None:
            self.study = self._open(smp)
            load_trials(self.study, state["trials"], self.distributions)
        else:
            self._rewind(int(state["journal_bytes"]))
            self.study = self._open(smp)
        self.pending = {int(k): int(v) for k, v in state["pending"].items()}

    def _rewind(self, size: int) -> None:
        """Cut the journal back to its length at the snapshot (what came after it is replayed by the run)."""
        path = self.storage_path
        assert path is not None
        have = os.path.getsize(path) if os.path.exists(path) else 0
        if have < size:
            raise ValueError(f"the optuna journal {path} holds {have} bytes, fewer than the {size} its "
                             f"snapshot recorded: it does not belong to this snapshot")
        if have > size:
            with open(path, "r+b") as f:
                f.truncate(size)
                f.flush()
                os.fsync(f.fileno())
