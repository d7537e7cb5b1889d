"""One search, opened from its configuration: :meth:`Run.open` turns a :class:`nas.run.config.RunConfig` (and the
objects a Python caller hands in, :class:`Given`) into what a search needs: the space, the strategy, the scheduler,
the data, the run directory's writer, the executor (connecting to Ray where it needs Ray) and the loop.

Everything that can be refused is checked before anything is made: names, options, the space, the training
function, the data, a resume's budget and identity. Objects override names: ``Given(space=NB201Space(channels=4))``
records ``nb201`` with its arguments, an executor object its registered name, a training function its import path
(:func:`nas.core.spec.train_spec`). A resume that cannot get the run's training function (or its Dataset object)
again is refused with one line saying how to resume it.

>>> import tempfile
>>> from nas.run.config import RunConfig, TrainSection
>>> cfg = RunConfig.from_mapping({"space": "toy", "strategy": "random", "budget": 3, "executor": "inprocess",
...                               "dataset": "none", "train_function": "nas.train.simple:noop",
...                               "run_dir": tempfile.mkdtemp() + "/run"})
>>> with Run.open(cfg) as run:
...     _ = run.loop.run()
>>> len(run.frame()), run.config.train.function
(3, 'nas.train.simple:noop')
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from nas.core import registry
from nas.core.nearest import did_you_mean
from nas.core.scheduler import Scheduler
from nas.core.space import SearchSpace
from nas.core.spec import (
    BUILTIN,
    CUSTOM,
    check_space,
    check_train,
    resolve_space_spec,
    space_from_spec,
    train_from_spec,
    train_spec,
)
from nas.core.strategy import Strategy
from nas.core.types import Trial
from nas.engine.cluster import workers_text
from nas.engine.interfaces import Callback
from nas.engine.loop import SearchLoop
from nas.engine.protocol import Executor, ExecutorConfig, SimulatedClock, build_executor
from nas.engine.stop import StopSignal
from nas.parts import (
    answer_warmup,
    build_scheduler,
    build_strategy,
    builtin_trains,
    check_inputs,
    connect,
    executor_name,
    keep_warm_weights,
    python_only,
)
from nas.run.config import RunConfig, TrainSection
from nas.run.journal import bulk_load
from nas.run.reader import results_frame
from nas.run.rerun import Diverged, Rerun, ended_by_itself
from nas.run.store import RunStore, read_config
from nas.run.warmstart import WarmTrial, load_warm_start, tell_warm_start
from nas.train.data import Dataset, dataset_fingerprint, load_dataset
from nas.train.hparams import check_searched_augmentation

log = logging.getLogger(__name__)
TrainFn = Callable[..., Any]


@dataclasses.dataclass(frozen=True)
class Given:
    """Objects a Python caller hands in; each overrides the config's name for it."""

    space: SearchSpace | None = None
    strategy: Strategy | None = None
    train: TrainFn | None = None
    data: Dataset | None = None
    executor: Executor | None = None


def default_run_dir(space: str, strategy: str) -> str:
    """``runs/<time>-<space>-<strategy>``, with ``-2``, ``-3``... where a search of the same second took it (short
    searches in a loop were refused: "already holds a run")."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path("runs") / f"{stamp}-{space.replace(':', '.')}-{strategy}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return str(path)


class Run:
    """An open search: its final ``config`` (objects recorded by name), ``space``, ``store``, ``executor`` and
    ``loop``. Close it (or use it as a context manager) to shut down an executor it built and release the run
    directory; :meth:`frame` is its results table."""

    def __init__(self, config: RunConfig, space: SearchSpace, store: RunStore, executor: Executor, loop: SearchLoop,
                 warm: Sequence[WarmTrial], *, own_executor: bool, dashboard: str | None) -> None:
        self.config, self.space, self.store, self.executor, self.loop = config, space, store, executor, loop
        self.warm, self.own_executor, self.dashboard = list(warm), own_executor, dashboard

    @classmethod
    def open(cls, config: RunConfig, given: Given | None = None, *, resume: bool = False,
             callbacks: Sequence[Callback] = (), stop: StopSignal | None = None,
             store_options: Mapping[str, Any] | None = None, notify: Callable[[str], None] | None = None) -> Run:
        """The search ``config`` describes, ready to run (``resume``: the run in ``config.run_dir``, continued).
        ``notify`` hears what a user should know as it happens (the dashboard's URL; default: the log)."""
        given, notify = given or Given(), notify or log.info
        config = config.with_absolute_paths()  # (run.json names them so: a resume from another folder finds them)
        recorded = _resumable(config, given) if resume else None
        check_inputs(config, resume=resume, strategy=given.strategy is None, space=given.space is None,
                     data=given.data is None, executor=given.executor is None,
                     train=given.train is None)  # (names first: nothing built yet)
        config, space, data, train = _resolve(config, given, resume)
        check_space(space, None if given.space is not None else config.search.space,
                    builds=given.executor is None and builtin_trains(config))
        try:
            strategy = build_strategy(given.strategy or config.search.strategy, space, config.search.seed,
                                      config.search.strategy_options, config.search.objectives)
        except ValueError as e:
            if not resume:
                raise
            raise ValueError(f"cannot resume {config.run_dir!r}: this version refuses its strategy's options as "
                             f"run.json records them ({e}); its finished trials stay readable (nas results), and a "
                             "new run can take them as a warm start (--warm-start) where its strategy takes one"
                             ) from None
        answer_warmup(strategy, space, data, config, notify, resume=resume)  # (before anything is made: it may refuse)
        scheduler = build_scheduler(config, strategy)
        counts = recorded.search.warm_start_counts if recorded is not None else []  # (what it was told)
        warm = load_warm_start(config.search.warm_start, space_spec=space.spec(), objectives=config.search.objectives,
                               trained=None if resume else config, counts=counts)
        if not resume and warm:  # (recorded: a resume and the views take these, though a source run went on)
            counts = [sum(w.run == str(r) for w in warm) for r in config.search.warm_start]
            config = dataclasses.replace(config, search=dataclasses.replace(config.search, warm_start_counts=counts))
        if data is not None:
            config.train.settings.check_data(data)  # e.g. augmentation on tabular data: before any worker starts
            if isinstance(searched := config.search.strategy_options.get("hparams"), Mapping):
                check_searched_augmentation(searched, data.task.input_shape)  # (and what PBT may draw)
        store = _open_store(config, space, resume, store_options or {})
        executor, url = given.executor, None
        try:
            strategy = _with_state_file(config, given, store, strategy, space)
            if executor is None:
                executor, url = _make_executor(config, space, data, train, notify)
            if not resume and scheduler is not None and (check := getattr(executor, "check_scheduler", None)):
                check(scheduler.name, scheduler.rungs)  # (an executor that reports only at some epochs; a run made
                # before the check resumes as it was made: the options the refusal names cannot change on a resume)
            rerun = _reruns(config, given, store, executor)
            if rerun and store.restored is not None:
                notify(f"running the search again up to its journal's end ({len(store.restored.records):,} records, "
                       "each checked) to continue it exactly")
            try:
                loop = _loop(config, store, executor, strategy, scheduler, warm, callbacks, stop,
                             own=given.executor is None, rerun=rerun)
            except Diverged as e:  # (nothing written yet: resume as any other run, replaying the journal)
                log.warning("cannot continue %s exactly (%s): its journal is replayed instead, and trials it had "
                            "running when it stopped start again at this resume's clock", config.run_dir, e)
                executor.shutdown()
                executor, url = _make_executor(config, space, data, train, notify)
                strategy = build_strategy(config.search.strategy, space, config.search.seed,
                                          config.search.strategy_options, config.search.objectives)
                answer_warmup(strategy, space, data, config, notify, resume=True)
                try:
                    loop = _loop(config, store, executor, strategy, build_scheduler(config, strategy), warm,
                                 callbacks, stop, own=True)
                except ValueError as refused:  # (the replay's refusal: say where the journal first differed too)
                    raise ValueError(f"{refused} (run again from its start, the search first differed {e})") from None
        except BaseException:
            if executor is not None and given.executor is None:
                executor.shutdown()
            store.discard()  # (a new run that never started is taken back; a resumed one only closed)
            raise
        return cls(config, space, store, executor, loop, warm, own_executor=given.executor is None, dashboard=url)

    def close(self) -> None:
        try:
            if self.own_executor:
                self.executor.shutdown()
        finally:
            self.store.close()

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def frame(self) -> pd.DataFrame:
        """One row per finished trial (warm-start trials first: see :func:`nas.run.reader.results_frame`);
        ``attrs`` hold ``run_dir``, ``summary``, ``interrupted``, ``dashboard`` and, with several objectives,
        ``front``."""
        loop = self.loop
        df = results_frame([*((w.trial, w.result) for w in self.warm), *loop.results()], self.space.format)
        df.attrs.update(run_dir=self.config.run_dir, summary=loop.summary(), interrupted=loop.interrupted,
                        dashboard=self.dashboard)
        if len(self.config.search.objectives) > 1:  # a multi-objective run: its Pareto front (feasible trials only)
            from nas.core.front import pareto_front

            df.attrs["front"] = pareto_front(df, self.config.search.objectives)
        return df


def _resolve(config: RunConfig, given: Given, resume: bool) -> tuple[RunConfig, SearchSpace, Dataset | None,
                                                                     TrainFn | None]:
    """The config with every object recorded by name, the space, the data and the training function."""
    s, t, e = config.search, config.train, config.execution
    space = given.space or space_from_spec(s.space, s.space_args)
    spec = space.spec()
    if given.train is not None:
        if not callable(given.train):
            raise ValueError(f"train must be a function train(ctx), got {given.train!r}")
        check_train(given.train, train_spec(given.train))
        function, train = train_spec(given.train), given.train
    elif given.executor is not None:
        function, train = f"{CUSTOM} (the given executor's own)", None
    else:
        function, train = t.function, _training_function(config, resume)
    executor_class: str | None
    if given.executor is not None:
        executor, executor_class = executor_name(given.executor), _qualname(given.executor)
        own = getattr(given.executor, "trial_workers", 1)  # (the run records the gangs an executor you built has)
        if e.trial_workers not in (1, own):
            raise ValueError(f"trial_workers={e.trial_workers!r} with an executor of {own} per trial: give it to the "
                             "executor you build")
        e = dataclasses.replace(e, trial_workers=own,
                                gang_strategy=getattr(given.executor, "gang_strategy", e.gang_strategy))
        built_for = getattr(given.executor, "space", None)
        if isinstance(built_for, SearchSpace) and built_for.dims() != space.dims():
            raise ValueError(f"the executor you built runs the space {built_for.spec()['class']!r}, not this "
                             f"search's {spec['class']!r}: build it with the search's space")
    else:
        executor, executor_class = e.executor, e.executor_class
        _check_executor(config, resume)
        if executor == "simulated":
            _check_simulated(config, spec["class"], trains=function != BUILTIN, resume=resume)
            made_with_data = resume and read_config(Path(str(config.run_dir))).train.dataset is not None
            if not made_with_data:  # (its table answers every trial: loading digits cost each search 1-6 s; a
                t = dataclasses.replace(t, dataset=None)  # run made before, which recorded it, resumes with it)
    data: Dataset | None = given.data
    if data is None and t.dataset is not None:
        data = load_dataset(t.dataset, seed=s.seed)
    elif data is None and t.data_object is not None:
        raise ValueError(python_only(config, resume, f"was given a Dataset object ({t.data_object!r}) in Python",
                                      "data=<that dataset>"))
    fingerprint = None if data is None else dataset_fingerprint(data)
    supernet_sha256 = None
    if t.supernet is not None:  # each trial's sub-network evaluated with the supernet's weights, not trained
        train = _supernet_eval(config, space, data, train)
        supernet_sha256 = train.info.sha256
        _warn_of_supernet(t.supernet, train.info.epoch, fingerprint, config)
    config = dataclasses.replace(
        config, run_dir=config.run_dir or default_run_dir(spec["class"], given.strategy.name if given.strategy
                                                         else s.strategy),
        search=dataclasses.replace(s, space=spec["class"], space_args=spec["args"],
                                   strategy=given.strategy.name if given.strategy else s.strategy),
        train=dataclasses.replace(t, function=function, dataset=None if given.data is not None else t.dataset,
                                  data_object=given.data.name if given.data is not None else t.data_object,
                                  dataset_fingerprint=fingerprint,
                                  supernet_sha256=supernet_sha256),
        execution=dataclasses.replace(e, executor=executor, executor_class=executor_class))
    return config, space, data, train


def _supernet_eval(config: RunConfig, space: SearchSpace, data: Dataset | None, train: TrainFn | None) -> Any:
    """The training function of a search of the supernet ``config.train.supernet`` names (checked to fit)."""
    from nas.train.supernet_eval import SupernetEval, for_search

    options = dict(config.train.supernet_options)
    unknown = sorted(set(options) - {"bn_batches", "bn_batch_size", "finetune_steps"})
    if unknown:
        allowed = ["bn_batches", "bn_batch_size", "finetune_steps"]
        raise ValueError(f"unknown supernet options {unknown}{did_you_mean(unknown, allowed)}; allowed: "
                         f"{', '.join(allowed)}")
    assert config.train.supernet is not None
    if not space.has_supernet and data is not None:
        space.supernet(data.task)  # the space's own one-line refusal, before the supernet is read
    _refuse_search_run(Path(config.train.supernet))
    ev = SupernetEval(config.train.supernet, space=space, seed=config.search.seed, **options)
    return for_search(ev, space, data, train)


def _refuse_search_run(path: Path) -> None:
    """A search's run directory given as the supernet: said as what it is (the supernet's own refusal, "holds no
    trained supernet", named a `nas supernet train --resume` there, which refuses a search run)."""
    from nas.run.layout import read_run_json
    from nas.run.supernet_store import KIND
    from nas.train.supernet_io import WEIGHTS

    if (path / WEIGHTS).is_file() or not (path / "run.json").is_file():
        return
    try:
        made = read_run_json(path)
    except ValueError:
        return  # (the supernet's reading says what is wrong)
    if made.get("kind") != KIND and isinstance(made.get("search"), dict):
        raise ValueError(f"{str(path)!r} is a search run, not a supernet run directory: pass the run directory of a "
                         "trained supernet (`nas supernet train --run-dir DIR`)")


def _warn_of_supernet(supernet: str, epoch: int, fingerprint: str | None, config: RunConfig) -> None:
    """A warning where the supernet in ``supernet`` (its weights of ``epoch``) is not finished, or the search's data
    is not what it was trained on (its run's dataset fingerprint): other data, or the same dataset split by another
    seed, whose validation examples then include ones the supernet trained on (scores too high). Weights without
    their run say nothing to compare."""
    from nas.run.supernet_store import read_run, supernet_status

    try:
        trained = read_run(Path(supernet))
        state = (supernet_status(supernet) or {}).get("state")
    except (ValueError, OSError):
        return
    planned = trained.get("epochs")
    if isinstance(planned, int) and epoch < planned and state == "running":
        log.warning("the supernet %s is still training (epoch %d of %d): sub-networks are scored with the weights of "
                    "epoch %d, and this search stops when the next epoch's are written; search it once it is "
                    "finished", supernet, epoch, planned, epoch)
    elif isinstance(planned, int) and epoch < planned:  # (stopped or failed: scores of part-trained weights)
        log.warning("the supernet %s has trained %d of its %d epochs (state %s): sub-networks are scored with those "
                    "weights; to score them with the finished supernet, continue it first with "
                    "`nas supernet train --resume --run-dir %s`", supernet, epoch, planned, state, supernet)
    if fingerprint is not None and trained.get("dataset_fingerprint") not in (None, fingerprint):
        log.warning("the supernet %s was trained on dataset %r split with seed %s, other examples than this search's "
                    "(dataset %r, seed %s): sub-networks are scored on data the supernet saw in training or never "
                    "saw; search with the supernet's dataset and seed", supernet, trained.get("dataset"),
                    trained.get("seed"), config.train.dataset or config.train.data_object, config.search.seed)


def _resumable(config: RunConfig, given: Given) -> RunConfig:
    """Refuse at once (before anything is built) a resume with a lower budget, of a space that is no SearchSpace
    class, or one that cannot get the run's custom training function or Dataset object again (a Python caller
    hands them in); the run's config as it records it."""
    if config.run_dir is None:
        raise ValueError("resume=True needs the run_dir of the run to continue")
    prior = read_config(Path(config.run_dir)).resumed_as(config.run_dir, budget=config.search.budget)  # (budget first)
    if given.space is None:  # what run.json names must be a SearchSpace class (imported as the search did, never
        resolve_space_spec(prior.search.space, allow_import=True, outside=config.run_dir)  # from the run directory)
    t = prior.train
    if given.train is None and given.executor is None:
        _training_function(prior, resume=True)
    if t.data_object is not None and given.data is None and given.executor is None:
        raise ValueError(python_only(prior, True, f"was given a Dataset object ({t.data_object!r}) in Python",
                                      "data=<that dataset>"))
    return prior


def _training_function(config: RunConfig, resume: bool) -> TrainFn | None:
    spec = config.train.function
    if spec.startswith(CUSTOM):
        raise ValueError(python_only(config, resume, f"trains with a function that is {spec}",
                                      "train=<that function>"))
    return train_from_spec(spec, outside=config.run_dir if resume else None) if spec != BUILTIN else None


def _check_executor(config: RunConfig, resume: bool) -> None:
    e = config.execution
    if e.executor_class is not None and e.executor not in registry.executors.names():
        raise ValueError(python_only(config, resume, f"ran on an executor object of class {e.executor_class}, "
                                      "which is not registered", "executor=<that executor>"))
    registry.executors.check(e.executor)  # a ValueError naming the known ones


def _check_simulated(config: RunConfig, space: str, *, trains: bool, resume: bool) -> None:
    """The simulated executor answers each trial from its table, of one space, at the table's epochs, and runs no
    training function (one handed in was never called; another space's trials all failed: "architecture keys do
    not match"). A new run's epochs or dataset that the table would not answer are refused (``--epochs 1`` was
    answered at 12, ``--dataset cifar100`` from CIFAR-10's table); the defaults stand for the table's own."""
    name = config.execution.executor_options.get("benchmark", "nb201-cifar10")
    table = registry.tables.get(name) if isinstance(name, str) else name
    kind = table.func if isinstance(table, functools.partial) else table
    answers = getattr(kind, "space", None)
    defaults, t = TrainSection(), config.train
    if not resume and t.dataset != defaults.dataset and t.dataset is not None:
        raise ValueError(f"the simulated executor answers each trial from its table ({name}), not from a dataset "
                         f"(got dataset {t.dataset!r}): leave it out, or choose the table with the executor option "
                         f"benchmark, one of {', '.join(registry.tables.names())}")
    own = getattr(kind, "epochs", None)  # (the table's schedule; a class of it says so, a factory may not)
    fidelities = getattr(kind, "fidelities", None) or ((own,) if isinstance(own, int) else None)
    epochs = t.settings.epochs
    if not resume and fidelities is not None and epochs not in fidelities and epochs != defaults.settings.epochs:
        raise ValueError(f"the simulated executor's table {name} answers at {' or '.join(map(str, fidelities))} "
                         f"epochs, got epochs {epochs!r}: give one of them, or leave it out (the table's {own})")
    if trains:
        raise ValueError(f"the simulated executor answers each trial from its table ({name}) and runs no training "
                         f"function: leave train out, or run it on the inprocess or ray executor")
    if answers is not None and space != answers:
        raise ValueError(f"the simulated executor's table {name} answers the space {answers!r}, not {space!r}: "
                         f"search {answers!r}, or run this space on the inprocess or ray executor")


def _qualname(obj: object) -> str:
    return f"{type(obj).__module__}:{type(obj).__qualname__}"


def _open_store(config: RunConfig, space: SearchSpace, resume: bool, options: Mapping[str, Any]) -> RunStore:
    """The writer of a new run directory, or (``resume``) of the run there once this config is checked to be the
    same search and its journal to fit ``space``. A refusal changes nothing."""
    run_dir = str(config.run_dir)
    if not resume:
        created = dataclasses.replace(config, created=datetime.datetime.now().isoformat())
        store = RunStore.create(run_dir, created.to_json(), **options)
    else:
        def check(trial: Trial) -> None:
            try:
                space.validate(trial.arch)
            except ValueError as e:
                raise ValueError(f"cannot resume {run_dir!r}: its journal holds trial {trial.trial_id}, which is "
                                 f"not in space {config.search.space!r} ({e})") from None

        store = RunStore.resume(run_dir, config.to_json(), check, **options)
    store.format_arch = space.format
    return store


def _with_state_file(config: RunConfig, given: Given, store: RunStore, strategy: Strategy,
                     space: SearchSpace) -> Strategy:
    """A strategy that keeps its state in a file of its own (Optuna's journal storage: data, not a pickle) gets it
    in the run directory. A resume with no snapshot yet starts the strategy afresh: so does its file."""
    s = config.search
    state_file = None if given.strategy is not None else registry.strategies.get(s.strategy).state_file
    if state_file is None or "storage" in s.strategy_options:
        return strategy
    storage = store.path / state_file
    if store.restored is not None and store.restored.snapshot is None:
        storage.unlink(missing_ok=True)
    return build_strategy(s.strategy, space, s.seed, {**s.strategy_options, "storage": str(storage)}, s.objectives)


def _make_executor(config: RunConfig, space: SearchSpace, data: Dataset | None, train: TrainFn | None,
                   notify: Callable[[str], None]) -> tuple[Executor, str | None]:
    e, name, url = config.execution, config.execution.executor, None
    namespace, on_ray, started = f"nas-{Path(str(config.run_dir)).name}", registry.executors.get(name).needs_ray, 0.0
    if on_ray:
        started = time.monotonic()
        url = connect(e.address, dashboard=e.dashboard, run_name=Path(str(config.run_dir)).name, notify=notify)
        if url:
            notify(f"Ray dashboard: {url}")
    executor = build_executor(name, ExecutorConfig(
        space, data, config.train.settings, workers=e.workers, train=train, cpus_per_trial=e.cpus_per_trial,
        gpus_per_trial=e.gpus_per_trial, max_retries=e.max_retries, namespace=namespace, seed=config.search.seed,
        options=dict(e.executor_options), trial_workers=e.trial_workers, gang_strategy=e.gang_strategy))
    if on_ray:  # (the Ray executors return once every worker has answered)
        notify(f"{workers_text(e.workers, e.trial_workers)} ready ({time.monotonic() - started:.1f} s for Ray and "
               "the workers to start)")
    return executor, url


def _reruns(config: RunConfig, given: Given, store: RunStore, executor: Executor) -> bool:
    """Whether a resume runs the search again from its start against its journal (:mod:`nas.run.rerun`): the
    executor simulated, so deterministic and free (and, with the strategy, built here from names, so built again
    where the journal differs), the strategy seeded and holding no state in a file of its own, and the run not one
    that ended by itself (nothing in flight to restore: its replay is as exact, and costs no second search)."""
    s = config.search
    return (store.restored is not None and isinstance(executor, SimulatedClock) and given.executor is None
            and given.strategy is None and s.seed is not None
            and registry.strategies.get(s.strategy).state_file is None and not ended_by_itself(store.path))


def _loop(config: RunConfig, store: RunStore, executor: Executor, strategy: Strategy, scheduler: Scheduler | None,
          warm: Sequence[WarmTrial], callbacks: Sequence[Callback], stop: StopSignal | None, *,
          own: bool, rerun: bool = False) -> SearchLoop:
    """The search's loop; a resumed one restored from its journal, or (``rerun``) run again up to the journal's
    end, each record checked to be the journal's (Diverged where one is not)."""
    from nas.monitor.status import monitoring_callbacks

    run_dir, s = str(config.run_dir), config.search
    on_ray = own and registry.executors.get(config.execution.executor).needs_ray
    monitors = monitoring_callbacks(run_dir, given=callbacks, ray_namespace=f"nas-{Path(run_dir).name}" if on_ray
                                    else None, logs=config.execution.log, objectives=s.objectives)
    writer = Rerun(store, store.restored.records) if rerun and store.restored is not None else None
    made = store.prior.search if writer is not None and store.prior is not None else s  # (the journal's budgets)
    loop = SearchLoop(strategy, executor, budget=made.budget, time_budget=made.time_budget, store=writer or store,
                      callbacks=[*callbacks, *monitors], stop=stop, scheduler=scheduler)
    if warm and (writer or store.restored is None or store.restored.snapshot is None):  # (a snapshot holds them)
        tell_warm_start(strategy, warm)
    if warm and s.strategy_options.get("inherit"):
        keep_warm_weights(executor, warm)
    if writer is not None:
        if not loop.fast_forward(lambda: writer.caught_up):
            raise Diverged(f"run again, the search ended with {loop.finished} trials finished where the journal "
                           f"goes on after line {writer.records[writer.matched - 1].line if writer.matched else 0}")
        loop.store, loop.budget, loop.time_budget = store, s.budget, s.time_budget  # (a raised budget: from here)
    elif store.restored is not None:
        with bulk_load(freeze=True):  # (no collector passes over the replayed records)
            loop.restore(store.restored)
    if store.restored is not None:
        store.fix_best(loop.best)
    return loop


__all__ = ["Given", "Run", "default_run_dir"]
