"""The Python API: one call runs a whole search and returns its results as a pandas DataFrame.

>>> from nas.search_spaces.toy import ToySpace, toy_score
>>> from nas.train.simple import scored
>>> import tempfile
>>> df = search(ToySpace(), strategy="evolution", budget=30, executor="inprocess", seed=0,
...             strategy_options={"population": 10, "sample_size": 3}, data=None, train=scored(toy_score),
...             run_dir=tempfile.mkdtemp())
>>> len(df), df["state"].unique().tolist()
(30, ['COMPLETE'])
"""

from __future__ import annotations

import dataclasses
import datetime
import inspect
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from nas.core import registry
from nas.core.scheduler import Scheduler, make_scheduler
from nas.core.space import SearchSpace
from nas.core.spec import resolve_space_spec
from nas.core.strategy import Strategy
from nas.core.types import Trial
from nas.engine.inprocess import InProcessExecutor
from nas.engine.interfaces import Callback
from nas.engine.loop import SearchLoop
from nas.engine.protocol import Executor, ExecutorConfig, build_executor
from nas.engine.stop import StopSignal
from nas.monitor.status import monitoring_callbacks
from nas.run.config import RunConfig
from nas.run.journal import bulk_load
from nas.run.reader import load_run, results_frame
from nas.run.store import RunStore
from nas.run.warmstart import WarmTrial, kept_checkpoint, load_warm_start, tell_warm_start
from nas.train.context import TrialContext
from nas.train.data import Dataset, dataset_fingerprint, load_dataset
from nas.train.settings import TrainSettings

log = logging.getLogger(__name__)

SearchConfig = RunConfig  # (the name this API had; one configuration object end to end)
__all__ = ["SearchConfig", "connect", "executor_names", "load_results", "load_run", "make_strategy", "open_run",
           "resolve_space", "search", "space_from_spec"]


def executor_names() -> list[str]:
    """The registered executors (``nas.core.registry.executors``): ray, inprocess, simulated, and any you add."""
    return registry.executors.names()


def resolve_space(spec: str | SearchSpace) -> SearchSpace:
    """A space from a registered name (``nb201``) or ``module:Class`` naming a SearchSpace subclass (or a
    module-level instance); anything else, such as a function, is refused (see :mod:`nas.core.spec`)."""
    if isinstance(spec, SearchSpace):
        return spec
    found = resolve_space_spec(spec, allow_import=True)
    return found if isinstance(found, SearchSpace) else found()


def space_spec(space: SearchSpace) -> str:
    """How run.json names a space: its registered name, else ``module:Class``."""
    if space.registered_name and registry.spaces.names().count(space.registered_name):
        return space.registered_name
    return f"{type(space).__module__}:{type(space).__qualname__}"


def space_from_spec(spec: Mapping[str, Any]) -> SearchSpace:
    """The space ``run.json``'s ``space_spec`` records (:meth:`nas.SearchSpace.spec`), rebuilt with its
    constructor arguments. Only for ``--resume`` of a run the user points at."""
    name, args = spec.get("class"), spec.get("args") or {}
    if not isinstance(name, str) or not isinstance(args, Mapping):
        raise ValueError(f"run.json's space_spec {dict(spec)!r} is not a space specification")
    found = resolve_space_spec(name, allow_import=True)  # a SearchSpace subclass or instance, never a function
    if isinstance(found, SearchSpace):
        return found
    return found(**args)


def load_results(run_dir: str | os.PathLike[str]) -> pd.DataFrame:
    """The results table of a run directory (see :func:`load_run`)."""
    return load_run(run_dir)[1]


def make_strategy(name: str, space: SearchSpace, *, seed: int | None = None,
                  options: Mapping[str, Any] | None = None) -> Strategy:
    """A registered strategy with its options checked by name before construction."""
    cls = registry.strategies.get(name)
    options = dict(options or {})
    params = inspect.signature(cls.__init__).parameters
    allowed = [p for p, v in params.items() if v.kind is inspect.Parameter.KEYWORD_ONLY and p != "seed"]
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"unknown options {unknown} for strategy {name!r}; allowed: {allowed}")
    return cls(space, seed=seed, **options)


def connect(address: str | None = None, *, num_cpus: int | None = None, dashboard: bool = False,
            run_name: str | None = None) -> str | None:
    """Join the Ray cluster at ``address`` (or ``RAY_ADDRESS``), or start a new private one on loopback with
    Ray's token auth (:mod:`nas.engine.cluster`); the Ray job is named ``run_name``. Returns the dashboard's URL
    (None without one). A no-op returning None if Ray is already initialised in this process."""
    import ray

    from nas.engine import cluster

    if ray.is_initialized():
        return None
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        return cluster.join(address, run_name=run_name)
    return cluster.start_local(num_cpus=num_cpus, dashboard=dashboard, run_name=run_name)


def default_run_dir(space: str, strategy: str) -> str:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return str(Path("runs") / f"{stamp}-{space.replace(':', '.')}-{strategy}")


def search(
    space: str | SearchSpace = "macro",
    strategy: str | Strategy = "evolution",
    *,
    budget: int = 24,
    workers: int = 2,
    data: str | Dataset | None = "digits",
    executor: str | Executor = "ray",
    executor_options: Mapping[str, Any] | None = None,
    settings: TrainSettings | None = None,
    strategy_options: Mapping[str, Any] | None = None,
    seed: int = 0,
    run_dir: str | os.PathLike[str] | None = None,
    address: str | None = None,
    cpus_per_trial: float = 1.0,
    gpus_per_trial: float = 0.0,
    max_retries: int = 2,
    callbacks: list[Callback] | None = None,
    resume: bool = False,
    stop: StopSignal | None = None,
    run_options: Mapping[str, Any] | None = None,
    scheduler: str = "none",
    scheduler_options: Mapping[str, Any] | None = None,
    objectives: Sequence[str] | None = None,
    train: Callable[[TrialContext], Any] | None = None,
    warm_start: Sequence[str | os.PathLike[str]] = (),
    supernet: str | os.PathLike[str] | Callable[[TrialContext], Any] | None = None,
) -> pd.DataFrame:
    """Run a search and return one row per finished trial (see :func:`nas.run.reader.results_frame`).

    ``space`` and ``strategy`` are objects or registered names; ``executor`` is a registered name
    (``nas.core.registry.executors``: ``"ray"``, a pool of ``workers`` trainer actors on the local or given Ray
    cluster; ``"inprocess"``; ``"simulated"``, NAS-Bench-201 replay) or an Executor; ``executor_options``
    are the named executor's own (see :class:`nas.engine.protocol.ExecutorConfig`).
    The run directory (default ``runs/<time>-<space>-<strategy>``) holds the journal, the config and
    the best weights. ``df.attrs`` holds ``run_dir`` and the run's summary.

    ``resume=True`` continues the run in ``run_dir`` after a crash or an interrupt: pass the same
    space, strategy, options, seed, data and training settings (a difference is a ValueError naming
    it); ``budget`` may be raised. Finished trials come from the journal, the strategy from its saved
    state, and trials that were in flight run again under their own ids (see :mod:`nas.engine.replay`).
    ``scheduler`` (``nas.core.registry.schedulers``: none, asha, hyperband, median) stops (or pauses and promotes)
    trials on their per-epoch reports, with ``scheduler_options`` (e.g. ``{"eta": 3, "variant": "promotion"}``);
    ``objectives`` are the metrics searched for, each ``metric[:max|min]`` (default ``["val_acc"]``); ``train``
    is a training function of your own, ``train(ctx)`` (see :mod:`nas.train.context`), run in place of the
    built-in one; ``data=None`` runs it without a dataset, model or device (a scoring function on a toy space).
    ``warm_start``: earlier run directories of the same space and
    objectives whose finished trials the strategy is told before it asks anything (not re-run; in the
    returned frame with negative ids, their source in ``metrics``); with weight inheritance their kept weights
    can be inherited.
    ``supernet``: the run directory of a trained supernet (``nas supernet train``) of ``space``: each trial then
    evaluates its sub-network with the supernet's weights instead of training it (a
    :class:`nas.train.supernet_eval.SupernetEval`; pass one for its options).
    ``stop`` (a :class:`nas.engine.stop.StopSignal`) ends the search gracefully when requested;
    ``df.attrs["interrupted"]`` then says so. ``run_options`` go to the run directory's owner
    (:class:`nas.run.store.RunStore`: ``snapshot_every``, ``snapshot_seconds``, ``opener``).
    """
    if isinstance(executor, str):
        registry.executors.get(executor)  # a ValueError naming the known ones
    space_obj = resolve_space(space)
    settings = settings or TrainSettings(seed=seed)
    if objectives is not None:
        settings = dataclasses.replace(settings, objectives=tuple(objectives))
    if train is not None and not callable(train):
        raise ValueError(f"train must be a function train(ctx), got {train!r}")
    config = RunConfig(
        space=space_spec(space_obj), strategy=strategy.name if isinstance(strategy, Strategy) else strategy,
        strategy_options=dict(strategy_options or {}), budget=budget, workers=workers,
        dataset=data if isinstance(data, str) else "none" if data is None else data.name, seed=seed,
        run_dir=None if run_dir is None else str(run_dir), executor=executor if isinstance(executor, str) else "ray",
        address=address, cpus_per_trial=cpus_per_trial, gpus_per_trial=gpus_per_trial, max_retries=max_retries,
        scheduler=scheduler, scheduler_options=dict(scheduler_options or {}),
        warm_start=[str(p) for p in warm_start],
    ).with_settings(settings)  # every value type-checked here, before anything runs
    strat = build_strategy(strategy, space_obj, seed, strategy_options, config.objectives)
    sched = build_scheduler(config, strat, seed)
    warm = load_warm_start(config.warm_start, space_spec=space_obj.spec(), objectives=config.objectives)
    dataset = load_dataset(data, seed=seed) if isinstance(data, str) else data
    if dataset is not None:
        settings.check_data(dataset)  # e.g. augmentation on tabular data: one line, before any worker starts
    if supernet is not None:
        from nas.train.supernet_eval import for_search

        train = for_search(supernet, space_obj, dataset, train)
    run_path = Path(run_dir or default_run_dir(space_spec(space_obj), config.strategy))
    record = {
        **config.to_json(), "run_dir": str(run_path), "strategy": strategy if isinstance(strategy, str) else strat.name,
        "space_spec": space_obj.spec(),
        "dataset_fingerprint": None if dataset is None else dataset_fingerprint(dataset),
        "data": data if isinstance(data, str) else None,
        "settings": dataclasses.asdict(settings), "created": datetime.datetime.now().isoformat(),
        "executor": executor if isinstance(executor, str) else (
            "inprocess" if isinstance(executor, InProcessExecutor) else "ray"),
        "executor_class": type(executor).__name__ if isinstance(executor, Executor) else None,
    }
    store = open_run(run_path, record, space_obj, resume=resume, given_run_dir=run_dir is not None,
                     **dict(run_options or {}))
    store.format_arch = space_obj.format
    own_executor = isinstance(executor, str)
    try:
        state_file = None if isinstance(strategy, Strategy) else registry.strategies.get(strategy).state_file
        if state_file is not None and "storage" not in (strategy_options or {}):
            # A strategy that keeps its state in a file of its own (Optuna's journal storage: data, not a pickle)
            # gets it in the run directory. A resume with no snapshot yet starts the strategy afresh: so does its file.
            storage = run_path / state_file
            if store.restored is not None and store.restored.snapshot is None:
                storage.unlink(missing_ok=True)
            strat = build_strategy(strategy, space_obj, seed, {**dict(strategy_options or {}), "storage": str(storage)},
                                   config.objectives)
        if isinstance(executor, str):
            if registry.executors.get(executor).needs_ray:
                connect(address, num_cpus=None, run_name=run_path.name)
            ex = build_executor(executor, ExecutorConfig(
                space_obj, dataset, settings, workers=workers, train=train, cpus_per_trial=cpus_per_trial,
                gpus_per_trial=gpus_per_trial, max_retries=max_retries, namespace=f"nas-{run_path.name}", seed=seed,
                options=dict(executor_options or {})))
        else:
            ex = executor
    except BaseException:
        store.close()
        raise
    try:
        monitors = monitoring_callbacks(run_path, given=callbacks or [],
                                        ray_namespace=f"nas-{run_path.name}" if executor == "ray" else None)
        loop = SearchLoop(strat, ex, budget=budget, store=store, callbacks=[*(callbacks or []), *monitors],
                          stop=stop, scheduler=sched)
        if warm and (store.restored is None or store.restored.snapshot is None):  # (a snapshot holds them)
            tell_warm_start(strat, warm)
        if warm and dict(strategy_options or {}).get("inherit"):
            keep_warm_weights(ex, warm)
        if store.restored is not None:
            with bulk_load(freeze=True):  # (no collector passes over the replayed records)
                loop.restore(store.restored)
            store.fix_best(loop.best)
        loop.run()
    finally:
        try:
            if own_executor:
                ex.shutdown()
        finally:
            store.close()
    df = results_frame([*((w.trial, w.result) for w in warm), *loop.results()], space_obj.format)
    df.attrs["run_dir"] = str(run_path)
    if len(config.objectives) > 1:  # a multi-objective run: its Pareto front (feasible trials only)
        from nas.core.front import pareto_front

        df.attrs["front"] = pareto_front(df, config.objectives)
    df.attrs["summary"] = loop.summary()
    df.attrs["interrupted"] = loop.interrupted
    return df


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


def keep_warm_weights(executor: Executor, warm: Sequence[WarmTrial]) -> None:
    """The kept weights of warm-start trials, handed to the executor under their new ids, so that children
    can inherit from them (only those an earlier run kept: its checkpoints and best weights)."""
    for w in warm:
        data = kept_checkpoint(w.run, w.source_id)
        if data is not None:
            executor.checkpoints.put(w.trial.trial_id, data)


def build_scheduler(config: RunConfig, strategy: Strategy, seed: int) -> Scheduler | None:
    """The run's scheduler (None for ``none``), its options checked, over ``config.epochs`` epochs; a
    strategy that stops its own trials refuses every other scheduler with one line saying why."""
    if config.scheduler == "none":
        return None
    if strategy.stops_own_trials:
        raise ValueError(f"scheduler {config.scheduler!r} does not compose with strategy {strategy.name!r}: "
                         f"{strategy.refusal}; use --scheduler none")
    return make_scheduler(config.scheduler, max_epochs=config.epochs, seed=seed, options=config.scheduler_options)


def open_run(run_dir: str | os.PathLike[str], record: dict[str, Any], space: SearchSpace, *, resume: bool,
             given_run_dir: bool = True, **store_options: Any) -> RunStore:
    """The writer of a new run directory, or (``resume``) of the run there once ``record`` (this call's
    run.json) is checked to be the same search and its journal to fit ``space``. A refusal changes nothing."""
    if not resume:
        return RunStore.create(run_dir, record, **store_options)
    if not given_run_dir:
        raise ValueError("resume=True needs the run_dir of the run to continue")

    def check(trial: Trial) -> None:
        try:
            space.validate(trial.arch)
        except ValueError as e:
            raise ValueError(f"cannot resume {str(run_dir)!r}: its journal holds trial {trial.trial_id}, "
                             f"which is not in space {record['space']!r} ({e})") from None

    return RunStore.resume(run_dir, record, check, **store_options)
