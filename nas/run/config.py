"""One configuration object, a tree: :class:`RunConfig` holds ``search`` (what is searched and how), ``train`` (the
dataset, the training function and its :class:`nas.train.settings.TrainSettings`), ``execution`` (where trials run)
and ``run_dir``. The CLI's flags, a config file and ``nas.search(...)`` fill it; ``run.json`` is its serialization
(format 3, :meth:`RunConfig.to_json`); :meth:`RunConfig.identity` is what a resume compares.

Each field describes itself (:func:`nas.core.fields.option`): the ``nas search`` flags and the flat keys of a config
file (``epochs = 5``, ``[strategy_options]``) are its leaves (:func:`leaves`), each under its own name. Values are
type-checked with one line naming the key and the type it needs.

>>> RunConfig.from_mapping({"budget": 10, "epochs": 3}).train.settings.epochs
3
>>> RunConfig.from_mapping({"search": {"budget": 10}}).search.budget
10
>>> RunConfig.from_mapping({"amp": "false"})
Traceback (most recent call last):
...
ValueError: config key 'amp' must be a boolean (true or false), got 'false' (str)
>>> RunConfig.from_mapping({"budget": "ten"})
Traceback (most recent call last):
...
ValueError: config key 'budget' must be an integer, got 'ten' (str)
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from nas.core.fields import option
from nas.core.objectives import Objectives
from nas.core.spec import same_function
from nas.core.types import python_numbers
from nas.engine.protocol import GANG_STRATEGIES
from nas.run.config_tree import BUILTIN, check_type, leaves, plain, section_from_json, sections
from nas.train.settings import TrainSettings

FORMAT_VERSION = 3



class DifferentSearch(ValueError):
    """A resume refused because the run on disk is another search: ``diffs``, each ``"field: run has X, this call Y"``
    (:meth:`RunConfig.check_resume`); :func:`nas.oneshot.retrain` says them as a retraining's."""

    def __init__(self, where: object, diffs: list[str]) -> None:
        super().__init__(f"cannot resume {str(where)!r}: it is a different search ({'; '.join(diffs)})")
        self.diffs = diffs

@dataclasses.dataclass
class SearchSection:
    """What is searched and how: the space, the strategy, the budget, the objectives, the scheduler."""

    space: str = option("macro", help="registered space name (see `nas spaces`) or module:Class of your own "
                        "SearchSpace")
    space_args: dict[str, Any] = option(factory=dict, flag="--space-option", metavar="KEY=VALUE",
                                        help="an argument of the space's constructor, e.g. --space-option channels=8 "
                                        "(repeatable)")
    strategy: str = option("evolution", help="registered strategy name (see `nas strategies`)")
    strategy_options: dict[str, Any] = option(factory=dict, flag=("-o", "--option"), metavar="KEY=VALUE",
                                              help="a strategy option, e.g. -o population=20 -o sample_size=5 "
                                              "(repeatable)")
    budget: int = option(24, help="number of trials to finish")
    time_budget: float | None = option(None, help="seconds (on the executor's clock) after which the search ends, "
                                       "trials still running then unfinished", runtime=True)
    seed: int = option(0, help="seed of the strategy, the data split and the training")
    objectives: list[str] = option(factory=lambda: ["val_acc:max"], flag="--objective", metavar="METRIC[:max|min]",
                                   help="a metric the trials report, to maximise (default) or minimise; repeat it "
                                   "for a multi-objective search")
    scheduler: str = option("none", help="early stopping on per-epoch reports: none, asha, hyperband or median "
                            "(see `nas schedulers`)")
    scheduler_options: dict[str, Any] = option(factory=dict, flag="--scheduler-option", metavar="KEY=VALUE",
                                               help="a scheduler option, e.g. --scheduler-option eta=3 (repeatable)")
    warm_start: list[str] = option(factory=list, flag="--warm-start", metavar="RUN_DIR",
                                   help="an earlier run (same space and objectives) whose finished trials the "
                                   "strategy learns from before its first ask, without re-running them (repeatable)")
    warm_start_counts: list[int] = option(factory=list, fact=True, help="the trials taken from each warm-start run, "
                                          "in its order (a resume and the views take as many, though it grew)")

    def __post_init__(self) -> None:
        check_fields(self)
        at_least(self.budget, 1, "budget")
        at_least(self.seed, 0, "seed")
        if self.time_budget is not None and not 0 < self.time_budget < math.inf:  # (inf: say none; it is not JSON)
            raise ValueError(f"config key 'time_budget' must be a finite number of seconds > 0 (or none), got "
                             f"{self.time_budget!r}")
        self.objectives = Objectives(self.objectives).to_list()  # a ValueError names a bad one
        self.warm_start = [str(p) for p in self.warm_start]

    def space_spec(self) -> dict[str, Any]:
        """The space as :meth:`nas.core.space.SearchSpace.spec` records it: class and constructor arguments."""
        return {"class": self.space, "args": dict(self.space_args)}


@dataclasses.dataclass
class TrainSection:
    """How each candidate trains: its data, its training function and that function's settings."""

    dataset: str | None = option("digits", help="digits, synthetic, a .npz file with arrays x, y, or images from "
                                 "disk: cifar10:DIR, cifar100:DIR, imagefolder:DIR (options: DIR?val=0.1&size=32); "
                                 "none: no data (a training function that needs none)")
    recipe: str | None = option(None, help="training recipe (see `nas recipes`), e.g. nb201; options given "
                                "explicitly win over it")
    function: str = option(BUILTIN, name="train_function", metavar="MODULE:FUNCTION",
                           help="the training function: builtin, or module:function naming a train(ctx) of your own")
    supernet: str | None = option(None, metavar="RUN_DIR", help="a trained supernet (nas supernet train): each "
                                  "trial evaluates its sub-network with the supernet's weights instead of training it")
    supernet_options: dict[str, Any] = option(factory=dict, flag="--supernet-option", metavar="KEY=VALUE",
                                              help="how a sub-network is evaluated: bn_batches (batch-norm "
                                              "recalibration batches, default 8), bn_batch_size, finetune_steps "
                                              "(default 0) (repeatable)")
    supernet_sha256: str | None = option(None, fact=True, help="the SHA-256 of the supernet's weights")
    settings: TrainSettings = dataclasses.field(default_factory=TrainSettings)
    data_object: str | None = option(None, fact=True, help="the name of a Dataset object given in Python")
    dataset_fingerprint: str | None = option(None, fact=True, help="the dataset's content fingerprint")

    def __post_init__(self) -> None:
        if self.dataset == "none":
            self.dataset = None
        if self.function == "nas.train.fit:fit":  # (the built-in one by its import path: checked as the built-in)
            self.function = BUILTIN
        check_fields(self)
        if not isinstance(self.settings, TrainSettings):
            raise ValueError(f"config key 'settings' must be a TrainSettings, got {self.settings!r}")


@dataclasses.dataclass
class ExecutionSection:
    """Where and how trials run; a resume may change any of it."""

    executor: str = option("ray", help="ray, inprocess or simulated (registered executors: "
                           "nas.core.registry.executors)")
    workers: int = option(2, help="trainer actors (trials in parallel)")
    cpus_per_trial: float = option(1.0, help="CPUs per trainer actor; torch uses this many threads")
    gpus_per_trial: float = option(0.0, help="GPUs per trainer actor, fractional packs several trials on one GPU")
    max_retries: int = option(2, help="resubmissions of a trial whose worker died")
    trial_workers: int = option(1, help="processes that train each trial data-parallel (torch DDP, executor ray); "
                                "--workers then counts gangs of this many actors, and --cpus-per-trial and "
                                "--gpus-per-trial are per process")
    gang_strategy: str = option("PACK", help="how a gang's actors are placed: on as few nodes as hold them (PACK) "
                                "or on as many (SPREAD); STRICT_PACK and STRICT_SPREAD insist")
    address: str | None = option(None, help="Ray cluster to join (default: $RAY_ADDRESS, else start a local one)")
    dashboard: bool = option(False, help="start Ray's dashboard (on 127.0.0.1) with a local cluster and print its "
                             "URL")
    executor_options: dict[str, Any] = option(factory=dict, flag="--executor-option", metavar="KEY=VALUE",
                                              help="an option of the executor, e.g. --executor-option prefetch=false "
                                              "(repeatable)")
    executor_class: str | None = option(None, fact=True, help="the class of an executor object given in Python")
    log: list[str] = option(factory=list, flag="--log", metavar="KIND:DIR",
                            help="also log the trials to tensorboard:DIR (curves, hparams) or mlflow:DIR (a local "
                            "store: DIR/mlflow.db) (repeatable)")

    def __post_init__(self) -> None:
        check_fields(self)
        for spec in self.log:
            kind, sep, where = str(spec).partition(":")
            if not sep or kind not in ("tensorboard", "mlflow") or not where:
                raise ValueError(f"--log {spec!r} must be tensorboard:DIR or mlflow:DIR")
        at_least(self.workers, 1, "workers")
        at_least(self.max_retries, 0, "max_retries")
        at_least(self.trial_workers, 1, "trial_workers")
        if self.gang_strategy.upper() not in GANG_STRATEGIES:
            raise ValueError(f"config key 'gang_strategy' must be one of {', '.join(GANG_STRATEGIES)}, "
                             f"got {self.gang_strategy!r}")
        self.gang_strategy = self.gang_strategy.upper()
        if self.trial_workers > 1 and self.executor != "ray":
            raise ValueError(f"trial_workers={self.trial_workers} (data-parallel trials) needs executor 'ray', "
                             f"not {self.executor!r}")
        if not 0 < self.cpus_per_trial < math.inf:
            raise ValueError(f"cpus_per_trial must be a finite number > 0, got {self.cpus_per_trial!r}")
        g = self.gpus_per_trial
        if not (0 <= g <= 1 or float(g).is_integer() and g > 1):
            raise ValueError(f"gpus_per_trial must be a fraction in [0, 1] (0.25 packs 4 trials on a GPU) or a "
                             f"whole number of GPUs, got {g!r}")


@dataclasses.dataclass(frozen=True)
class RunIdentity:
    """What makes a run the run it is: a resume with any other value would mix two searches. (The budget may be
    raised; where trials run, and the runtime settings such as the device, may change.)"""

    space: str
    space_args: Mapping[str, Any]
    strategy: str
    strategy_options: Mapping[str, Any]
    seed: int
    objectives: tuple[str, ...]
    scheduler: str
    scheduler_options: Mapping[str, Any]
    warm_start: tuple[str, ...]
    dataset: str | None
    data_object: str | None
    dataset_fingerprint: str | None
    train_function: str
    supernet: str | None
    supernet_options: Mapping[str, Any]
    supernet_sha256: str | None
    training: TrainSettings  # its runtime fields at their defaults; seed and objectives are the search's own

    def differences(self, current: RunIdentity) -> list[str]:
        """Each field on which ``current`` differs from this (the run's), as ``key: run has X, this call Y``."""
        out = []
        for name, mine, theirs in _pairs(self, current):
            if name == "train_function" and same_function(mine, theirs):
                continue
            if plain(mine) != plain(theirs):
                out.append(f"{name}: run has {mine!r}, this call {theirs!r}")
        return out


def _pairs(a: Any, b: Any) -> list[tuple[str, Any, Any]]:
    out = []
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        out += _pairs(x, y) if dataclasses.is_dataclass(x) else [(f.name, x, y)]
    return out


@dataclasses.dataclass
class RunConfig:
    """Everything a search run is, in one place (the CLI and config files fill it; so can you)."""

    search: SearchSection = dataclasses.field(default_factory=SearchSection)
    train: TrainSection = dataclasses.field(default_factory=TrainSection)
    execution: ExecutionSection = dataclasses.field(default_factory=ExecutionSection)
    run_dir: str | None = option(None, help="where the journal, config and best weights go (default "
                                 "runs/<time>-<space>-<strategy>)")
    created: str | None = option(None, fact=True, help="when the run was made")
    resumed: list[str] = option(factory=list, fact=True, help="when it was resumed")

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in sections(type(self)) and not isinstance(value, sections(type(self))[f.name]):
                raise ValueError(f"config key {f.name!r} must be a {sections(type(self))[f.name].__name__}, "
                                 f"got {value!r}")
        check_fields(self)
        s = self.train.settings  # the run has one seed and one list of objectives: the search's
        if s.seed != self.search.seed or list(s.objectives) != self.search.objectives:
            self.train.settings = dataclasses.replace(s, seed=self.search.seed,
                                                      objectives=tuple(self.search.objectives))

    # -- making one ------------------------------------------------------------------------------------------------
    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> RunConfig:
        """From a parsed config file, flags or keywords: flat keys (``epochs``, ``strategy_options``, and
        ``train_options``, a table of other TrainSettings fields) or section tables (``[search]``, ``[train]``,
        ``[execution]``), rejecting unknown keys by name. A ``recipe`` fills the settings not given."""
        from nas.run.config_tree import flat_values

        if not isinstance(values, Mapping):
            raise TypeError(f"a config is a mapping of option names to values, got {values!r} "
                            f"({type(values).__name__})")
        return _from_flat(flat_values(cls, python_numbers(values)))  # (np.int64(3): "must be an integer")

    @classmethod
    def from_json(cls, saved: Mapping[str, Any]) -> RunConfig:
        """The config ``run.json`` holds: format 3, or format 2 (flat) converted
        (:func:`nas.run.config_format2.from_format2`); another format is refused naming it."""
        found = saved.get("format")
        if found == 2:
            from nas.run.config_format2 import from_format2

            return from_format2(saved, cls)
        if found != FORMAT_VERSION:
            raise ValueError(f"written by an incompatible version (format {found!r}; this version reads format "
                             f"{FORMAT_VERSION} and converts format 2)")
        top = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(saved) - set(top) - {"format"})
        if unknown:
            raise ValueError(f"unknown keys {unknown}; format {FORMAT_VERSION} has {sorted(top)}")
        missing = [name for name in sections(cls) if name not in saved]
        if missing:  # (every format-3 run.json has its sections: one without is damaged, never "the defaults")
            raise ValueError(f"missing section{'s' * (len(missing) > 1)} {', '.join(map(repr, missing))}; format "
                             f"{FORMAT_VERSION} has {', '.join(map(repr, sections(cls)))}")
        values = {name: section_from_json(sections(cls)[name], saved[name], name) if name in sections(cls)
                  else saved[name] for name in top if name in saved}
        return cls(**values)

    @classmethod
    def coerce(cls, value: RunConfig | Mapping[str, Any]) -> RunConfig:
        """``value`` itself, or the config a mapping holds: run.json (with its format), or flat keys as format 2
        wrote them (``{"space": "toy", "budget": 3}``)."""
        if isinstance(value, RunConfig):
            return value
        if "format" in value:
            return cls.from_json(value)
        from nas.run.config_format2 import from_format2

        return from_format2(value, cls)

    def updated(self, values: Mapping[str, Any]) -> RunConfig:
        """This config with ``values`` (keys as :meth:`from_mapping` takes them) over it; what it records of the
        objects a run was given (its facts) stays. A ``recipe`` among them fills the settings this config leaves at
        their defaults (it overwrote a config file's own ``epochs``, ``lr`` and ``batch_size``: a 1-epoch search
        became a 200-epoch one)."""
        if not values:
            return self
        from nas.run.config_tree import flat_values

        mine = {leaf.name: _get(self, leaf.path) for leaf in leaves(RunConfig) if not leaf.about.fact}
        base = RunConfig()
        default = {leaf.name: _get(base, leaf.path) for leaf in leaves(RunConfig) if not leaf.about.fact}
        new = _from_flat({**mine, **flat_values(RunConfig, values, fills=lambda k: mine.get(k) == default.get(k))})
        for leaf in leaves(RunConfig):
            if leaf.about.fact:
                new = _set(new, leaf.path, _get(self, leaf.path))
        return new

    # -- what it is ------------------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """``run.json``: plain JSON data, with its format."""
        return {"format": FORMAT_VERSION, **json.loads(json.dumps(dataclasses.asdict(self), default=str))}

    def identity(self) -> RunIdentity:
        s, t = self.search, self.train
        default = TrainSettings()
        runtime = {name: getattr(default, name) for name in _runtime_fields()}
        training = dataclasses.replace(t.settings, **runtime, seed=default.seed, objectives=default.objectives)
        return RunIdentity(
            space=s.space, space_args=s.space_args, strategy=s.strategy, strategy_options=s.strategy_options,
            seed=s.seed, objectives=tuple(s.objectives), scheduler=s.scheduler, scheduler_options=s.scheduler_options,
            warm_start=tuple(str(Path(p).absolute()) for p in s.warm_start), dataset=t.dataset,
            data_object=t.data_object,
            dataset_fingerprint=t.dataset_fingerprint, train_function=t.function, supernet=_absolute(t.supernet),
            supernet_options=t.supernet_options, supernet_sha256=t.supernet_sha256, training=training)

    def with_absolute_paths(self) -> RunConfig:
        """This config with its warm-start runs and supernet named by absolute paths, as run.json records them: a
        relative one named another folder, or none, once the run was resumed from elsewhere."""
        s, t = self.search, self.train
        return dataclasses.replace(
            self, search=dataclasses.replace(s, warm_start=[str(Path(p).absolute()) for p in s.warm_start]),
            train=dataclasses.replace(t, supernet=_absolute(t.supernet)))

    # -- resuming --------------------------------------------------------------------------------------------------
    def resumed_as(self, where: object, budget: int | None = None, address: str | None = None,
                   trial_timeout: float | None = None, time_budget: float | None = None) -> RunConfig:
        """This run's config (of the run directory ``where``) to resume it: its budget raised to ``budget`` and its
        time budget to ``time_budget`` (never lowered: a ValueError), its Ray ``address`` and its ``trial_timeout``
        replaced where given, its ``run_dir`` where it is now. A time budget or trial timeout of ``math.inf`` is no
        limit (None: not given)."""
        if budget is not None and budget < self.search.budget:
            raise ValueError(f"budget may only be raised when resuming: {str(where)!r} has budget "
                             f"{self.search.budget}, got {budget}")
        had = self.search.time_budget
        if time_budget is not None and time_budget != math.inf and (had is None or time_budget < had):
            raise ValueError(f"time_budget may only be raised when resuming: {str(where)!r} has "
                             f"{'none (no limit)' if had is None else f'time_budget {had:g}'}, got {time_budget:g}")
        t = self.train
        if trial_timeout is not None:  # (a run that hung resumes with a limit: it ran the hung trial again for good)
            limit = None if trial_timeout == math.inf else trial_timeout
            t = dataclasses.replace(t, settings=dataclasses.replace(t.settings, trial_timeout=limit))
        return dataclasses.replace(
            self, run_dir=str(where), train=t,
            search=dataclasses.replace(self.search, budget=self.search.budget if budget is None else budget,
                                       time_budget=had if time_budget is None else
                                       None if time_budget == math.inf else time_budget),
            execution=dataclasses.replace(self.execution, address=address or self.execution.address))

    def check_resume(self, current: RunConfig, where: object) -> None:
        """Refuse (a ValueError) to continue this run (the one on disk) as ``current``: another search, or a
        lower budget."""
        diffs = self.identity().differences(current.identity())
        if diffs and all(d.startswith("supernet_sha256: ") for d in diffs):  # (said as what happened to it)
            raise ValueError(f"cannot resume {str(where)!r}: the supernet {self.train.supernet!r} was trained on or "
                             f"replaced since this search began, and its trials were scored with the weights of then; "
                             f"its finished trials stay readable; search the supernet as it is now into a new "
                             f"--run-dir ({diffs[0]})")
        if diffs:
            raise DifferentSearch(where, diffs)
        if current.search.budget < self.search.budget:
            raise ValueError(f"budget may only be raised when resuming: {str(where)!r} has budget "
                             f"{self.search.budget}, got {current.search.budget}")

    def with_runtime_of(self, recorded: RunConfig, given: Collection[str] = ()) -> RunConfig:
        """This config (a resume's) with the runtime settings ``recorded`` (the run's run.json) holds, but those
        ``given`` (named by the resume): a Python resume that did not repeat them ran with the defaults and recorded
        those, so a trial timeout or a device set before was lost for good."""
        mine, theirs = self.train.settings, recorded.train.settings
        kept = {name: getattr(theirs, name) for name in _runtime_fields() if name not in given}
        return dataclasses.replace(self, train=dataclasses.replace(
            self.train, settings=dataclasses.replace(mine, **kept)))

    def continued_by(self, current: RunConfig, when: str) -> RunConfig:
        """What run.json says once ``current`` resumed this run at ``when``: its budget, its execution and its
        training's runtime settings (a trial timeout, the device: the next resume runs with them)."""
        runtime = {name: getattr(current.train.settings, name) for name in _runtime_fields()}
        train = dataclasses.replace(self.train, settings=dataclasses.replace(self.train.settings, **runtime))
        return dataclasses.replace(self, search=dataclasses.replace(self.search, budget=current.search.budget,
                                                                    time_budget=current.search.time_budget),
                                   train=train, execution=current.execution, resumed=[*self.resumed, when])


def _runtime_fields() -> list[str]:
    """The TrainSettings a resume may change (how a run executes, not what it is)."""
    return [f.name for f in dataclasses.fields(TrainSettings) if (a := f.metadata.get("about")) is not None
            and a.runtime]


def _absolute(path: str | None) -> str | None:
    """``path`` made absolute against the current directory (None stays None). (A run made before run.json recorded
    absolute paths compares equal where it is resumed from the folder it was made in.)"""
    return None if path is None else str(Path(path).absolute())


def check_fields(obj: Any) -> None:
    """Every field of ``obj`` that :func:`nas.core.fields.option` made, type-checked (one line naming the key)."""
    for f in dataclasses.fields(obj):
        if "about" in f.metadata:
            a = f.metadata["about"]
            check_type(a.name or f.name, str(f.type), getattr(obj, f.name))


def at_least(value: int, low: int, key: str) -> None:
    if value < low:
        raise ValueError(f"config key {key!r} must be an integer >= {low}, got {value!r}")


def _get(obj: Any, path: tuple[str, ...]) -> Any:
    for name in path:
        obj = getattr(obj, name)
    return obj


def _set(obj: Any, path: tuple[str, ...], value: Any) -> Any:
    inner = value if len(path) == 1 else _set(getattr(obj, path[0]), path[1:], value)
    return dataclasses.replace(obj, **{path[0]: inner})


def _from_flat(values: Mapping[str, Any]) -> RunConfig:
    """A RunConfig from ``{leaf name: value}`` (names already checked to be leaves of the tree)."""
    by_name = {leaf.name: leaf for leaf in leaves(RunConfig)}
    tree: dict[str, dict[str, Any]] = {}
    settings: dict[str, Any] = {}
    top: dict[str, Any] = {}
    for name, value in values.items():
        leaf = by_name[name]
        check_type(leaf.name, leaf.type, value)
        if len(leaf.path) == 3:
            settings[leaf.path[2]] = tuple(value) if leaf.type.startswith("tuple") else value
        elif len(leaf.path) == 2:
            tree.setdefault(leaf.path[0], {})[leaf.path[1]] = value
        else:
            top[leaf.path[0]] = value
    search = SearchSection(**tree.get("search", {}))
    train = TrainSection(**{**tree.get("train", {}), "settings": TrainSettings(
        **{**settings, "seed": search.seed, "objectives": tuple(search.objectives)})})
    return RunConfig(search=search, train=train, execution=ExecutionSection(**tree.get("execution", {})), **top)


__all__ = ["FORMAT_VERSION", "DifferentSearch", "ExecutionSection", "RunConfig", "RunIdentity", "SearchSection",
           "TrainSection", "leaves"]
