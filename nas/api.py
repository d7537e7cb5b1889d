"""The Python API: one call runs a whole search and returns its results as a pandas DataFrame.

>>> from nas.search_spaces.toy import ToySpace, toy_score
>>> from nas.train.simple import scored
>>> import tempfile
>>> df = search(ToySpace(), strategy="evolution", budget=30, executor="inprocess", seed=0,
...             strategy_options={"population": 10, "sample_size": 3}, data=None, train=scored(toy_score),
...             run_dir=tempfile.mkdtemp())
>>> len(df), df["state"].unique().tolist()
(30, ['COMPLETE'])

The same search from a configuration (:class:`nas.run.config.RunConfig`, what a config file or the CLI fills):

>>> cfg = RunConfig.from_mapping({"space": "toy", "strategy": "random", "budget": 4, "executor": "inprocess",
...                               "dataset": "none", "run_dir": tempfile.mkdtemp()})
>>> len(search(cfg, train=scored(toy_score)))
4
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from nas.core import registry
from nas.core.objectives import objective_specs
from nas.core.space import SearchSpace
from nas.core.spec import space_from_spec
from nas.core.strategy import Strategy, check_strategy
from nas.core.types import python_numbers
from nas.engine.interfaces import Callback
from nas.engine.protocol import Executor
from nas.engine.stop import StopSignal
from nas.parts import build_strategy, connect, make_strategy
from nas.run.config import RunConfig
from nas.run.config_tree import leaves
from nas.run.reader import load_run
from nas.run.store import check_store_options, read_config
from nas.session import Given, Run, TrainFn
from nas.train.data import Dataset
from nas.train.settings import TrainSettings

SearchConfig = RunConfig  # (the name this API had; one configuration object end to end)
CALLBACK_HOOKS = tuple(name for name in vars(Callback) if name.startswith("on_"))  # (what the loop calls)
EXECUTOR_METHODS = tuple(name for name in vars(Executor) if not name.startswith("_"))  # (the Protocol's members)
resolve_space = space_from_spec  # (the name this API had)
_UNSET: Any = object()
__all__ = ["Run", "RunConfig", "SearchConfig", "build_strategy", "connect", "executor_names", "load_results",
           "load_run", "make_strategy", "resolve_space", "search", "space_from_spec"]


def executor_names() -> list[str]:
    """The registered executors (``nas.core.registry.executors``): ray, inprocess, simulated, and any you add."""
    return registry.executors.names()


def load_results(run_dir: str | os.PathLike[str]) -> pd.DataFrame:
    """The results table of a run directory (see :func:`nas.run.reader.load_run`)."""
    return load_run(run_dir)[1]


def search(config: RunConfig | str | SearchSpace | None = None, strategy: str | Strategy | None = None, *,
           space: str | SearchSpace | None = None, train: TrainFn | None = None,
           data: str | Dataset | None = _UNSET, settings: TrainSettings | None = None,
           executor: str | Executor | None = None, callbacks: Sequence[Callback] | None = None,
           stop: StopSignal | None = None, resume: bool = False, run_options: Mapping[str, Any] | None = None,
           notify: Callable[[str], None] | None = None, progress: bool | None = None,
           **keywords: Any) -> pd.DataFrame:
    """Run a search and return one row per finished trial (see :func:`nas.run.reader.results_frame`).

    ``config`` is a :class:`nas.run.config.RunConfig`, or (as before) the space; ``keywords`` are any of its keys
    by their flat names (``budget``, ``workers``, ``seed``, ``strategy_options``, ``scheduler``, ``objectives``,
    ``epochs``, ``run_dir``, ``executor_options``... see ``nas search --help``) and override it. Objects override
    names and are recorded by them: ``space`` (a SearchSpace, with its constructor arguments), ``strategy``,
    ``executor`` (an Executor, by its registered name), ``train`` (a training function ``train(ctx)``, see
    :mod:`nas.train.context`, by its import path: :func:`nas.core.spec.train_spec`), ``data`` (a dataset spec, a
    :class:`nas.train.data.Dataset`, or None: no data, model or device, for a scoring function on a toy space) and
    ``settings`` (TrainSettings; the run's ``seed`` and ``objectives`` stay the search's). ``supernet``: the run
    directory of a trained supernet (:func:`nas.oneshot.train_supernet`), or a
    :class:`nas.train.supernet_eval.SupernetEval` with its options: each trial then evaluates its sub-network with
    the supernet's weights instead of training it.

    ``resume=True`` continues the run in ``run_dir`` after a crash or an interrupt: pass the same search (a
    difference is a ValueError naming it; a custom training function must be handed in again); ``budget`` may
    be raised. ``stop`` (a :class:`nas.engine.stop.StopSignal`) ends the search gracefully when requested;
    ``df.attrs["interrupted"]`` then says so. ``run_options`` go to the run directory's owner
    (:class:`nas.run.store.RunStore`: ``snapshot_every``, ``snapshot_seconds``, ``opener``). ``df.attrs`` holds
    ``run_dir``, the run's ``summary`` and, on a local Ray cluster with its dashboard, ``dashboard``.
    ``progress``: a live progress bar (tqdm's, a widget in Jupyter); None (default) shows it on a terminal or in
    a notebook, False silences it (:func:`nas.monitor.progress.api_progress`).
    """
    from nas.monitor.progress import api_progress

    if stop is not None and not isinstance(stop, StopSignal):
        raise TypeError(f"stop must be a nas StopSignal, got {stop!r} ({type(stop).__name__})")
    if run_options is not None and not isinstance(run_options, Mapping):
        raise TypeError(f"run_options must be a mapping (snapshot_every=..., ...), got {run_options!r}")
    check_store_options(run_options or {})
    for name, value, allowed in (("resume", resume, (True, False)), ("progress", progress, (None, True, False))):
        if not any(value is a for a in allowed):  # ('no' was truthy: a resume)
            raise TypeError(f"{name} must be {' or '.join(map(str, allowed))}, got {value!r} ({type(value).__name__})")
    if notify is not None and not callable(notify):
        raise TypeError(f"notify must be a function of one line of text, got {notify!r} ({type(notify).__name__})")
    if isinstance(callbacks, Callback):  # (one, as a list of one)
        callbacks = [callbacks]
    if callbacks is not None and not isinstance(callbacks, list | tuple):
        raise TypeError(f"callbacks must be a nas.Callback or a list of them, got {callbacks!r} "
                        f"({type(callbacks).__name__})")
    for i, cb in enumerate(callbacks or ()):
        if not all(callable(getattr(cb, hook, None)) for hook in CALLBACK_HOOKS):
            raise TypeError(f"callbacks[{i}] must be a nas.Callback (with {', '.join(CALLBACK_HOOKS)}), got "
                            f"{cb!r} ({type(cb).__name__})")
    cfg, given = configure(config, strategy, space=space, train=train, data=data, settings=settings,
                           executor=executor, **keywords)
    if resume and not isinstance(config, RunConfig) and settings is None and cfg.run_dir is not None and (
            Path(cfg.run_dir) / "run.json").is_file():  # (the runtime settings it does not name: the run's own)
        cfg = cfg.with_runtime_of(read_config(Path(cfg.run_dir)), given=keywords)
    callbacks = [*(callbacks or ()), *api_progress(progress, callbacks or (), cfg.search.objectives)]
    with Run.open(cfg, given, resume=resume, callbacks=callbacks or (), stop=stop, store_options=run_options,
                  notify=notify) as run:
        run.loop.run()
    return run.frame()


def configure(config: RunConfig | str | SearchSpace | None = None, strategy: str | Strategy | None = None, *,
              space: str | SearchSpace | None = None, train: TrainFn | None = None, data: Any = _UNSET,
              settings: TrainSettings | None = None, executor: str | Executor | None = None,
              **keywords: Any) -> tuple[RunConfig, Given]:
    """:func:`search`'s arguments as a RunConfig (names and keywords, checked) and the objects that override it."""
    if not isinstance(config, RunConfig):
        config, space = None, config if space is None else space
    for key, value, kind, allowed in (
            ("space", space, SearchSpace, "a registered name, 'module:Class' or a nas.SearchSpace"),
            ("strategy", strategy, Strategy, "a registered name or a nas.Strategy"),
            ("executor", executor, None, f"a registered name ({', '.join(executor_names())}) or an Executor (with "
                                         f"{', '.join(EXECUTOR_METHODS)})")):
        ok = value is None or isinstance(value, str) or (
            isinstance(value, kind) if kind is not None else all(hasattr(value, m) for m in EXECUTOR_METHODS))
        if not ok:
            raise TypeError(f"{key} must be {allowed}, got {value!r} ({type(value).__name__})")
    if isinstance(strategy, Strategy):
        check_strategy(strategy)
    if "objectives" in keywords:  # (one, as the command line's --objective; several; or {metric: mode})
        keywords["objectives"] = [str(o) for o in objective_specs(keywords["objectives"])]
    optional = {leaf.name for leaf in leaves(RunConfig) if leaf.type.endswith("| None")}
    values: dict[str, Any] = {k: python_numbers(v) for k, v in keywords.items()
                              if v is not None or k in optional}  # None: default
    for key, value in (("space", space), ("strategy", strategy), ("executor", executor)):
        if isinstance(value, str):
            values[key] = value
    if data is not _UNSET and not isinstance(data, Dataset):
        if data is not None and not isinstance(data, str | os.PathLike):  # (str() of arrays: a 2 KB "name")
            raise TypeError(f"data must be a dataset's name or .npz path, a nas Dataset or None, got "
                            f"{type(data).__name__} (arrays: data=nas.Dataset.from_arrays(x, y))")
        values["dataset"] = None if data is None else os.fspath(data)
    if settings is not None and not isinstance(settings, TrainSettings):
        raise TypeError(f"settings must be a nas TrainSettings (TrainSettings(epochs=..., lr=...)), got {settings!r} "
                        f"({type(settings).__name__}); its keys may also be given to search() by name")
    if settings is not None:  # its fields, but the search's one seed and objectives
        flat = {k: v for k, v in settings.__dict__.items() if k not in ("seed", "objectives")}
        if settings.seed and values.get("seed", settings.seed) != settings.seed:
            raise ValueError(f"settings.seed {settings.seed} and seed {values['seed']} differ: a run has one seed")
        values = {**flat, "seed": settings.seed, "objectives": list(settings.objectives), **values}
    ev = values.get("supernet")
    if ev is not None and hasattr(ev, "run_dir") and hasattr(ev, "options"):  # a SupernetEval: its options too
        values["supernet"] = ev.run_dir
        values["supernet_options"] = {**{k: v for k, v in dataclasses.asdict(ev.options).items() if k != "seed"},
                                      **values.get("supernet_options", {})}
    for key in ("run_dir", "supernet"):
        if isinstance(values.get(key), os.PathLike):
            values[key] = os.fspath(values[key])
    if "warm_start" in values:  # (one run, as a path; or several)
        runs = values["warm_start"]
        runs = [runs] if isinstance(runs, str | os.PathLike) else runs
        if not isinstance(runs, list | tuple) or not all(isinstance(p, str | os.PathLike) for p in runs):
            raise TypeError(f"warm_start must be a run directory or a list of them, got {values['warm_start']!r}")
        values["warm_start"] = [os.fspath(p) for p in runs]
    if "objectives" in values:
        values["objectives"] = [str(o) for o in objective_specs(values["objectives"])]
    cfg = config.updated(values) if config is not None else RunConfig.from_mapping(values)
    return cfg, Given(space=space if isinstance(space, SearchSpace) else None,
                      strategy=strategy if isinstance(strategy, Strategy) else None, train=train,
                      data=data if isinstance(data, Dataset) else None,
                      executor=None if executor is None or isinstance(executor, str) else executor)
