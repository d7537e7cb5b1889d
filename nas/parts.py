"""The parts of a search built from names: the strategy (for its objectives), the scheduler, the executor's
registered name, and the Ray cluster the Ray executor needs. :class:`nas.session.Run` puts them together, after
:func:`check_inputs` has checked every name without building anything (nor importing torch or Ray).

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
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nas.core import registry
from nas.core.nearest import did_you_mean
from nas.core.scheduler import Scheduler, make_scheduler
from nas.core.space import SearchSpace
from nas.core.strategy import Strategy
from nas.core.types import python_numbers
from nas.engine.protocol import Executor, check_executor_options, prefetch_mode
from nas.run.config import RunConfig
from nas.run.config_tree import BUILTIN
from nas.train.hparams import check_searched

if TYPE_CHECKING:
    from nas.run.warmstart import WarmTrial
    from nas.train.data import Dataset

UNREGISTERED = "unregistered"


def make_strategy(name: str, space: SearchSpace, *, seed: int | None = None,
                  options: Mapping[str, Any] | None = None) -> Strategy:
    """A registered strategy with its options checked by name before construction."""
    options = dict(options or {})
    return strategy_class(name, options)(space, seed=seed, **options)


def strategy_class(name: str, options: Mapping[str, Any] = {}) -> type[Strategy]:  # noqa: B006  (never changed)
    """The registered strategy ``name`` (its module imported), refusing at once ``options`` its constructor lacks."""
    cls: type[Strategy] = registry.strategies.get(name)
    params = inspect.signature(cls.__init__).parameters
    allowed = [p for p, v in params.items() if v.kind is inspect.Parameter.KEYWORD_ONLY and p != "seed"]
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"unknown options {unknown} for strategy {name!r}{did_you_mean(unknown, allowed)}; "
                         f"allowed: {allowed}")
    return cls


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
    registry.schedulers.check(name)  # a ValueError naming the known ones
    if name == "none":
        return None
    composes(name, strategy.name, strategy)
    return make_scheduler(name, max_epochs=config.train.settings.epochs, seed=config.search.seed,
                          options=config.search.scheduler_options)


def composes(scheduler: str, name: str, strategy: Strategy | type[Strategy]) -> None:
    """A one-line ValueError when ``strategy`` (named ``name``) stops its own trials and ``scheduler`` is one."""
    if scheduler != "none" and strategy.stops_own_trials:
        raise ValueError(f"scheduler {scheduler!r} does not compose with strategy {name!r}: "
                         f"{strategy.refusal}; use --scheduler none")


def check_inputs(config: RunConfig, *, resume: bool = False, strategy: bool = True, space: bool = True,
                 data: bool = True, executor: bool = True, train: bool = True) -> None:
    """Every name ``config`` holds, checked before anything is built, so that a mistake is one line within a
    second: the space (a registered name, or ``module:Class``, imported: on a ``resume`` never from inside the run
    directory), the strategy and its options, the scheduler (built: it is pure and small) and whether it composes
    with the strategy, the executor, the dataset (an unknown name or a missing file; an existing one is loaded
    later), the objectives (with the built-in trainer on a training executor, metrics it reports) and the run
    directory (held by another search; for a new run, not new or empty). A registered name is
    found among the registry's names without importing the module of any other (nor torch or Ray for a misspelt
    one). Pass False for what a Python caller hands in as an object instead.

    >>> cfg = RunConfig.from_mapping({"space": "toy", "strategy": "evoluton"})
    >>> check_inputs(cfg)
    Traceback (most recent call last):
    ...
    ValueError: unknown strategy 'evoluton' (did you mean 'evolution'?); known: evolution, local, optuna, ...
    """
    from nas.core.scalarize import check_objectives
    from nas.core.spec import is_import_spec, resolve_space_spec

    s, t, e = config.search, config.train, config.execution
    if config.run_dir is not None:
        check_run_dir(config.run_dir, resume=resume)
    if space and is_import_spec(s.space):
        resolve_space_spec(s.space, allow_import=True, outside=config.run_dir if resume else None)
    elif space:
        registry.spaces.check(s.space)
    cls = None
    if strategy:
        cls = strategy_class(s.strategy, s.strategy_options)
        check_objectives(cls, s.objectives)
        if isinstance(searched := s.strategy_options.get("hparams"), Mapping):  # (a trial's: PBT's option)
            check_searched(searched)
        if cls.state_file is not None and "storage" in s.strategy_options:
            check_storage(s.strategy_options["storage"], config.run_dir, cls.state_file, resume=resume)
    registry.schedulers.check(s.scheduler)
    if s.scheduler == "none" and s.scheduler_options and not resume:  # (recorded in run.json, never used)
        raise ValueError(f"scheduler options {sorted(s.scheduler_options)} given with no scheduler (none); give the "
                         f"scheduler they are for (--scheduler asha, hyperband or median)")
    if t.settings.trial_timeout is not None and e.trial_workers > 1 and executor:  # (before Ray starts, not after)
        raise ValueError(f"trial_timeout ({t.settings.trial_timeout!r} s) is not enforced on data-parallel gangs "
                         f"(--trial-workers {e.trial_workers}) yet: leave it out, or train each trial on one worker")
    if t.supernet is None and t.supernet_options and not resume:
        raise ValueError(f"supernet options {sorted(t.supernet_options)} given with no supernet; they are for "
                         f"evaluating sub-networks of one (--supernet RUN_DIR)")
    if s.scheduler != "none":
        if cls is not None:
            composes(s.scheduler, s.strategy, cls)
        made = make_scheduler(s.scheduler, max_epochs=t.settings.epochs, seed=s.seed, options=s.scheduler_options)
        if made.pauses and s.strategy_options.get("child_epochs") is not None and not resume:
            raise ValueError(f"child_epochs={s.strategy_options['child_epochs']!r} (the epochs an inheriting child "
                             f"trains) and {s.scheduler}'s promotions (which continue a trial past them) do not go "
                             "together: leave child_epochs out, the scheduler deciding how long each trial trains, "
                             "or use its stopping variant")
    if executor and e.executor_class is None:
        registry.executors.check(e.executor)
        check_executor_options(e.executor, e.executor_options, gang=e.trial_workers > 1)
        if "prefetch" in e.executor_options:
            prefetch_mode(e.executor_options["prefetch"])
        check_device(t.settings.device, e.executor, e.gpus_per_trial)
        if e.executor != "ray" and not resume:  # (ignored, whatever they said: --address é searched, exit 0)
            for flag, given in (("--address", e.address), ("--dashboard", e.dashboard)):
                if given:
                    raise ValueError(f"{flag}{f' {given!r}' if isinstance(given, str) else ''} is for a Ray cluster; "
                                     f"executor {e.executor!r} starts none (drop it, or use --executor ray)")
        address = e.address or os.environ.get("RAY_ADDRESS")
        if address and e.executor == "ray":  # (Ray retries a dead address for minutes)
            from nas.engine.cluster import check_reachable

            check_reachable(address)
    if data and t.dataset is not None:
        check_dataset(t.dataset)
    if train and executor and builtin_trains(config):
        if data and t.dataset is None and t.data_object is not None:  # (said as "--dataset none", never typed)
            raise ValueError(python_only(config, resume, f"was given a Dataset object ({t.data_object!r}) in Python",
                                         "data=<that dataset>"))
        if data and t.dataset is None:
            raise ValueError("the built-in trainer needs data: --dataset none is for a training function of your own "
                             "that needs none (--train-function MODULE:FUNCTION)")
        check_reported(s.objectives, t.settings.reported() + ("ranks",) * (e.trial_workers > 1))
        check_gpu_metric(s.objectives, t.settings.device, e.executor, e.gpus_per_trial)
        searched = s.strategy_options.get("hparams")
        drawn = searched.get("schedule") if isinstance(searched, Mapping) else None
        if s.strategy == "pbt" and isinstance(drawn, list | tuple) and set(drawn) - {"constant"} and not resume:
            raise ValueError(f"pbt's hparams search the schedule ({list(drawn)}), and a member that draws "
                             f"{next(d for d in drawn if d != 'constant')} would start it again at each segment: leave "
                             "schedule out of hparams (pbt explores the learning rate itself)")
        if s.strategy == "pbt" and t.settings.schedule != "constant" and not resume:  # (a saw-tooth)
            raise ValueError(f"pbt trains each member segment after segment past the run's epochs, and the built-in "
                             f"trainer's {t.settings.schedule} schedule would start again at each segment (its "
                             f"learning rate back up after each anneal): use the constant schedule (pbt explores the "
                             f"learning rate itself)")
    for spec in e.log:
        check_log_dir(spec)


#: the examples a warm-up's proxies that need data see (as ``nas proxies`` and ``nas bench proxies`` by default)
WARMUP_BATCH = 32


def answer_warmup(strategy: Strategy, space: SearchSpace, data: Dataset | None, config: RunConfig,
                  notify: Callable[[str], None], *, resume: bool = False) -> None:
    """A strategy's zero-cost warm-up (``-o warmup=PROXY:M:K``) answered before its first ask: its M candidates are
    built for the run's data and scored by the proxy here, in the driver (one torch thread; each model seeded by the
    run's seed and its index; the proxies that need data see a minibatch of its training examples, prepared as
    training prepares them). A run the simulated executor answers from NAS-Bench-201's table builds them for 32x32
    RGB images in 10 classes and shows them generated CIFAR-shaped images, as ``nas bench proxies`` does. (No search
    answered it: every one with the option failed at its first ask.) The warm-up's time is spent before the search
    starts, outside its time budget."""
    from nas.strategies.warmup import pending, warm_up

    warmup = pending(strategy)
    if warmup is None:
        return
    import torch

    from nas.core.space import Task
    from nas.train.proxies import cifar_like_batch, minibatch, score_archs

    seed = config.search.seed
    if data is not None:
        task, (x, y) = data.task, minibatch(data.x_train, data.y_train, WARMUP_BATCH, seed)
    elif config.execution.executor == "simulated":
        task, (x, y) = Task((3, 32, 32), 10), cifar_like_batch(WARMUP_BATCH, seed)
    else:
        raise ValueError(f"warmup={warmup} builds its candidates for the run's data, and this run has none (dataset "
                         "none): leave the option out, or give the run a dataset")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # (tiny work in the driver)
    t0 = time.perf_counter()
    try:
        warm_up(strategy, lambda archs: score_archs(space, archs, task, names=[warmup.proxy], x=x, y=y,
                                                    seed=seed)[warmup.proxy])
    finally:
        torch.set_num_threads(threads)
    notify(f"warm-up: {warmup.candidates:,} random architectures scored by {warmup.proxy} in "
           f"{time.perf_counter() - t0:.1f} s; " + ("scored again, as the run's strategy is built again to resume"
                                                  if resume else f"the search starts from the top {warmup.keep}"))


def python_only(config: RunConfig, resume: bool, what: str, keyword: str) -> str:
    """The refusal of a run that was given an object in Python (``what`` it was) that nothing can build again from
    its record: give it again, or resume it from Python with the same one (``keyword``)."""
    if not resume:
        return f"this run {what}: give it again in Python ({keyword})"
    return (f"cannot resume {config.run_dir!r} here: it {what}; resume it from Python with the same one: "
            f"nas.search(..., run_dir={config.run_dir!r}, resume=True, {keyword})")


def builtin_trains(config: RunConfig) -> bool:
    """Whether the built-in trainer trains each trial of ``config``: its function, no supernet to evaluate with, on an
    executor that trains (not the simulated one, which answers from a table)."""
    t = config.train
    return t.function == BUILTIN and t.supernet is None and config.execution.executor in ("ray", "inprocess")


def check_device(device: str, executor: str, gpus_per_trial: float) -> None:
    """``--device cuda`` where no trial can have a GPU: on Ray, with no GPU asked per trial (Ray hides the GPUs
    from an actor that asks for none); in this process, on a machine without CUDA (torch imported for it only)."""
    if device != "cuda":
        return
    if executor == "ray" and gpus_per_trial == 0:
        raise ValueError("device='cuda' needs a GPU per trial: pass gpus_per_trial > 0 (--gpus-per-trial) on a Ray "
                         "cluster with GPUs")
    if executor == "inprocess":
        import torch

        if not torch.cuda.is_available():
            raise ValueError("device='cuda' was asked for, but this machine has no CUDA device (torch sees none); "
                             "use device auto (CUDA where there is one) or cpu")


def check_gpu_metric(objectives: Sequence[str], device: str, executor: str, gpus_per_trial: float) -> None:
    """Refuse at once an objective of ``peak_memory_mb`` where no trial can train on a GPU (CPU only, a Ray trial
    with no GPU asked for, or this process on a machine without CUDA): the built-in trainer measures it on CUDA
    only, so every trial failed OBJECTIVE_MISSING."""
    from nas.core.objectives import Objectives

    if "peak_memory_mb" not in {o.metric for o in Objectives(list(objectives))}:
        return
    if device == "cpu":
        why = "the device is cpu"
    elif executor == "ray" and gpus_per_trial == 0:
        why = "no GPU is asked per trial, --gpus-per-trial"
    elif executor == "inprocess" and device == "auto":
        import torch

        why = "" if torch.cuda.is_available() else "this machine has no CUDA device"
    else:
        why = ""
    if why:
        raise ValueError(f"objective 'peak_memory_mb' is measured on a GPU only, and every trial here trains on a "
                         f"CPU ({why}): leave it out, or run the trials on GPUs")


def check_storage(path: Any, run_dir: str | os.PathLike[str] | None, state_file: str, *, resume: bool) -> None:
    """A strategy's ``storage`` option (a file of its own state, e.g. Optuna's journal) named by the user: a file
    that is not a folder, in a folder that exists, and not one of any run directory's own files (those the run
    writes and a resume cuts back). A new run keeps the study in its own directory itself (``state_file``), so a
    path inside that directory is refused; a resume may name the run's own ``state_file``. What the file holds
    the strategy checks (:class:`nas.strategies.optuna_sampler.OptunaStrategy` refuses one that is not its
    journal)."""
    from nas.run.export import check_not_owned

    if not isinstance(path, (str, os.PathLike)):
        return  # (the strategy's constructor names the type it takes)
    shown = os.fspath(path)
    if shown == "":
        raise ValueError("strategy option storage is empty; give a file path for the study's journal")
    target = Path(path).expanduser()
    try:
        real = Path(os.path.realpath(target))
        if run_dir is not None:
            run = Path(os.path.realpath(Path(run_dir).expanduser()))
            if resume and real == run / state_file:
                return
            if not resume and run in (real, *real.parents):
                raise ValueError(f"strategy option storage={shown!r} lies in the new run's directory "
                                 f"{os.fspath(run_dir)!r}, where the run keeps its study itself ({state_file}): "
                                 f"leave the option out, or name a file outside it")
        try:
            check_not_owned(target)
        except ValueError as e:
            raise ValueError(f"strategy option storage: {e}") from None
        if target.exists() and not target.is_file():
            raise ValueError(f"strategy option storage={shown!r} is "
                             f"{'a folder' if target.is_dir() else 'not a regular file'}; give a file path")
        if not target.parent.is_dir():
            raise ValueError(f"strategy option storage={shown!r}: its folder {str(target.parent)!r} does not exist")
    except OSError as e:
        raise ValueError(f"strategy option storage={shown!r}: {e.strerror or e}") from None


def check_reported(objectives: Sequence[str], reported: Sequence[str]) -> None:
    """Refuse at once an objective the training function never reports: every trial would fail
    OBJECTIVE_MISSING."""
    from nas.core.objectives import Objectives

    for o in Objectives(list(objectives)):
        if o.metric not in reported:
            raise ValueError(f"objective {o.metric!r}{did_you_mean(o.metric, reported)} is not a metric the built-in "
                             f"trainer reports ({', '.join(reported)}); for another one give a training function "
                             f"that reports it (--train-function MODULE:FUNCTION)")


def check_log_dir(spec: str) -> None:
    """Refuse at once a ``--log KIND:DIR`` whose DIR is a file, or a run directory or inside one (whose files that
    run owns): found only once the search has started, it would leave a half-made run."""
    from pathlib import Path

    from nas.monitor.logs import check_installed
    from nas.run.export import check_export_dir

    check_installed(spec)
    where = Path(str(spec).partition(":")[2])
    if where.exists() and not where.is_dir():
        raise ValueError(f"--log {spec}: {str(where)!r} is a file; name a directory")
    check_export_dir(where, f"log (--log {spec}) into")


def check_run_dir(run_dir: str | os.PathLike[str], *, resume: bool, flag: str = "--run-dir") -> None:
    """Refuse at once a run directory another search holds (naming it), or for a new run one that is not writable,
    new or empty, in the order the store checks them when it takes the lock; leaves nothing behind. ``flag``: the
    option that named it, as the refusals say it."""
    from pathlib import Path

    from nas.run.layout import check_empty, check_new
    from nas.run.lock import RunLock, held

    if not str(run_dir).strip():
        raise ValueError(f"{flag} {str(run_dir)!r} is an empty path; name a folder")
    path = Path(run_dir)
    if not resume:
        check_new(path, flag=flag)
    if held(path):
        RunLock(path).acquire(flag).release()  # (its one-line refusal names the holder)
    if not resume:
        check_empty(path, flag=flag)


def check_dataset(name: str) -> None:
    """Refuse at once a dataset that is no built-in name, no existing .npz file and no existing image folder."""
    from pathlib import Path

    from nas.train.data import load_dataset

    kind = name.partition(":")[0]
    if kind in ("cifar10", "cifar100", "imagefolder"):
        from nas.train.datasets import find_cifar_dir, parse_spec

        root = parse_spec(name)[1]
        if not root.is_dir() and kind != "imagefolder":  # (where to get it and where to put it, as the loader says)
            find_cifar_dir(kind, root)
        if not root.is_dir():
            raise ValueError(f"dataset {name!r}: the folder {str(root)!r} does not exist")
    elif name not in ("digits", "synthetic") and not (Path(name).suffix == ".npz" and Path(name).is_file()):
        load_dataset(name)  # (no file or no such name: its one-line refusal, with the nearest name, at once)


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
    from nas.run.warmstart import kept_checkpoint

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

    if address is not None and not isinstance(address, str):
        raise TypeError(f"address must be a Ray cluster's address (a string such as 'host:6379') or None, got "
                        f"{address!r} ({type(address).__name__})")
    num_cpus = python_numbers(num_cpus)
    if num_cpus is not None and (isinstance(num_cpus, bool) or not isinstance(num_cpus, int) or num_cpus < 1):
        raise ValueError(f"num_cpus must be None (every CPU of this machine) or an integer >= 1, got {num_cpus!r}")
    if ray.is_initialized():
        return None
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        return cluster.join(address, run_name=run_name)
    return cluster.start_local(num_cpus=num_cpus, dashboard=dashboard, run_name=run_name, notify=notify)


__all__ = ["answer_warmup", "build_scheduler", "build_strategy", "builtin_trains", "check_dataset", "check_device",
           "check_gpu_metric", "check_inputs", "check_log_dir", "check_run_dir", "check_storage", "composes", "connect",
           "executor_name", "keep_warm_weights", "make_strategy", "python_only", "strategy_class"]
