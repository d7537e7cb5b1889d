"""The parts of a search built from names: the strategy (for its objectives), the scheduler, the executor's
registered name, and the Ray cluster the Ray executor needs. :class:`nas.session.Run` puts them together.

>>> from nas.search_spaces.toy import ToySpace
>>> make_strategy("evolution", ToySpace(), seed=0, options={"populaton": 3})
Traceback (most recent call last):
...
ValueError: unknown options ['populaton'] for strategy 'evolution' (did you mean 'population'?); allowed: [...]
>>> from nas.engine.inprocess import InProcessExecutor
>>> executor_name(InProcessExecutor(ToySpace(), None))
'inprocess'
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nas.core import registry
from nas.core.nearest import did_you_mean
from nas.core.scheduler import Scheduler, make_scheduler
from nas.core.space import SearchSpace
from nas.core.strategy import Strategy
from nas.engine.protocol import Executor
from nas.run.config import RunConfig
from nas.run.warmstart import WarmTrial, kept_checkpoint

UNREGISTERED = "unregistered"


def make_strategy(name: str, space: SearchSpace, *, seed: int | None = None,
                  options: Mapping[str, Any] | None = None) -> Strategy:
    """A registered strategy with its options checked by name before construction."""
    cls = registry.strategies.get(name)
    options = dict(options or {})
    params = inspect.signature(cls.__init__).parameters
    allowed = [p for p, v in params.items() if v.kind is inspect.Parameter.KEYWORD_ONLY and p != "seed"]
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"unknown options {unknown} for strategy {name!r}{did_you_mean(unknown, allowed)}; "
                         f"allowed: {allowed}")
    return cls(space, seed=seed, **options)


def build_strategy(strategy: str | Strategy, space: SearchSpace, seed: int, options: Mapping[str, Any] | None,
                   objectives: Sequence[str]) -> Strategy:
    """The run's strategy for its objectives (:attr:`nas.core.strategy.Strategy.multi_objective`): built with them
    where it ranks several itself, wrapped in ParEGO's random scalarization where it does not, refused (one
    line) where it cannot."""
    from nas.core.scalarize import check_objectives, for_objectives

    if isinstance(strategy, Strategy):
        return for_objectives(strategy, objectives, seed=seed)
    cls = registry.strategies.get(strategy)
    check_objectives(cls, objectives)
    opts = dict(options or {})
    if len(objectives) > 1 and cls.multi_objective == "native":
        opts["objectives"] = list(objectives)
    return for_objectives(make_strategy(strategy, space, seed=seed, options=opts), objectives, seed=seed)


def build_scheduler(config: RunConfig, strategy: Strategy) -> Scheduler | None:
    """The run's scheduler (None for ``none``), its options checked, over the run's epochs; a strategy that
    stops its own trials refuses every other scheduler with one line saying why."""
    name = config.search.scheduler
    registry.schedulers.get(name)  # a ValueError naming the known ones
    if name == "none":
        return None
    if strategy.stops_own_trials:
        raise ValueError(f"scheduler {name!r} does not compose with strategy {strategy.name!r}: "
                         f"{strategy.refusal}; use --scheduler none")
    return make_scheduler(name, max_epochs=config.train.settings.epochs, seed=config.search.seed,
                          options=config.search.scheduler_options)


def executor_name(executor: Executor) -> str:
    """The registered name of an executor object's class (``simulated`` for a SimulatedExecutor...), so that
    run.json says where the run ran; ``unregistered`` for a class of your own that is not registered."""
    for name, cls in registry.executors.items():
        if isinstance(executor, cls):
            return name
    return getattr(type(executor), "registered_as", UNREGISTERED)  # (a class a registered one builds: gangs)


def keep_warm_weights(executor: Executor, warm: Sequence[WarmTrial]) -> None:
    """The kept weights of warm-start trials, handed to the executor under their new ids, so that children
    can inherit from them (only those an earlier run kept: its checkpoints and best weights)."""
    for w in warm:
        data = kept_checkpoint(w.run, w.source_id)
        if data is not None:
            executor.checkpoints.put(w.trial.trial_id, data)


def connect(address: str | None = None, *, num_cpus: int | None = None, dashboard: bool = False,
            run_name: str | None = None, notify: Callable[[str], None] | None = None) -> str | None:
    """Join the Ray cluster at ``address`` (or ``RAY_ADDRESS``), or start a new private one on loopback with
    Ray's token auth (:mod:`nas.engine.cluster`); the Ray job is named ``run_name``. Returns the dashboard's URL
    (None without one). A no-op returning None if Ray is already initialised in this process. ``notify`` hears
    one line about the cluster's token auth, in place of Ray's own warning."""
    import ray

    from nas.engine import cluster

    if ray.is_initialized():
        return None
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        return cluster.join(address, run_name=run_name)
    return cluster.start_local(num_cpus=num_cpus, dashboard=dashboard, run_name=run_name, notify=notify)


__all__ = ["build_scheduler", "build_strategy", "connect", "executor_name", "keep_warm_weights", "make_strategy"]
