"""One configuration object, end to end: the CLI's flags, a config file and ``nas.search(...)`` fill a
:class:`RunConfig`; every field is type-checked with one message naming the key and the type it needs;
``run.json`` is its serialization (plus what identifies the run: the space's constructor arguments, the
dataset's content fingerprint, the training settings); a resume compares the fields that define the run.

>>> RunConfig(budget=10).budget
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
from collections.abc import Mapping
from typing import Any

FORMAT_VERSION = 2
#: fields of run.json that make a run what it is: a resume with other values would mix two searches
DEFINING = ("space_spec", "strategy", "strategy_options", "seed", "dataset", "dataset_fingerprint", "epochs", "lr",
            "batch_size", "weight_decay", "momentum", "optimizer", "max_params", "train_options", "objectives",
            "scheduler", "scheduler_options", "max_flops", "max_latency_ms", "warm_start")
#: RunConfig fields that are TrainSettings fields
SETTINGS = ("epochs", "lr", "batch_size", "weight_decay", "momentum", "optimizer", "max_params", "device", "amp",
            "seed", "max_flops", "max_latency_ms", "objectives")

_KIND = {"int": "an integer", "float": "a number", "str": "a string", "bool": "a boolean (true or false)",
         "dict[str, Any]": "a table (mapping)", "list[str]": "a list of strings"}


@dataclasses.dataclass
class RunConfig:
    """Everything a search run is, in one place (the CLI and config files fill it; so can you)."""

    space: str = "macro"
    strategy: str = "evolution"
    strategy_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    budget: int = 24
    workers: int = 2
    dataset: str = "digits"
    epochs: int = 5
    lr: float = 1e-2
    batch_size: int = 64
    optimizer: str = "adam"
    weight_decay: float = 0.0
    momentum: float = 0.9
    max_params: int = 50_000_000
    seed: int = 0
    run_dir: str | None = None
    executor: str = "ray"
    address: str | None = None
    cpus_per_trial: float = 1.0
    gpus_per_trial: float = 0.0
    max_retries: int = 2
    trial_workers: int = 1  # processes per trial (data-parallel, ray only); workers then counts gangs
    gang_strategy: str = "PACK"  # how a gang's ranks are placed: PACK, SPREAD, STRICT_PACK or STRICT_SPREAD
    device: str = "auto"
    amp: bool = True
    dashboard: bool = False
    recipe: str | None = None  # a named set of training settings (nas.train.recipes); given options win
    objectives: list[str] = dataclasses.field(default_factory=lambda: ["val_acc:max"])  # metric[:max|min]
    scheduler: str = "none"  # early stopping: none, asha, hyperband, median (nas.core.registry.schedulers)
    scheduler_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    max_flops: float | None = None  # constraints: a candidate over one is INFEASIBLE, and not trained
    max_latency_ms: float | None = None
    warm_start: list[str] = dataclasses.field(default_factory=list)  # earlier run directories to learn from
    train_options: dict[str, Any] = dataclasses.field(default_factory=dict)  # any other TrainSettings field

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            _check_type(f.name, str(f.type), getattr(self, f.name))
        for name in ("budget", "workers", "epochs", "batch_size", "max_params", "trial_workers"):
            if getattr(self, name) < 1:
                raise ValueError(f"config key {name!r} must be an integer >= 1, got {getattr(self, name)!r}")
        for name in ("max_retries", "seed"):
            if getattr(self, name) < 0:
                raise ValueError(f"config key {name!r} must be an integer >= 0, got {getattr(self, name)!r}")
        if not self.lr > 0:
            raise ValueError(f"config key 'lr' must be a number > 0, got {self.lr!r}")
        if self.weight_decay < 0 or self.momentum < 0:
            raise ValueError(f"weight_decay and momentum must be >= 0, got {self.weight_decay!r}, {self.momentum!r}")
        from nas.core import registry
        from nas.core.objectives import Objectives
        from nas.train.constraints import Constraints

        registry.executors.get(self.executor)  # a ValueError naming the known ones
        from nas.engine.protocol import GANG_STRATEGIES

        if self.gang_strategy.upper() not in GANG_STRATEGIES:
            raise ValueError(f"config key 'gang_strategy' must be one of {', '.join(GANG_STRATEGIES)}, "
                             f"got {self.gang_strategy!r}")
        self.gang_strategy = self.gang_strategy.upper()
        if self.trial_workers > 1 and self.executor != "ray":
            raise ValueError(f"trial_workers={self.trial_workers} (data-parallel trials) needs executor 'ray', "
                             f"not {self.executor!r}")
        registry.schedulers.get(self.scheduler)
        self.objectives = Objectives(list(self.objectives)).to_list()  # a ValueError names a bad one
        Constraints(max_params=self.max_params, max_flops=self.max_flops, max_latency_ms=self.max_latency_ms)
        if not self.cpus_per_trial > 0:
            raise ValueError(f"cpus_per_trial must be > 0, got {self.cpus_per_trial!r}")
        g = self.gpus_per_trial
        if not (0 <= g <= 1 or float(g).is_integer() and g > 1):
            raise ValueError(f"gpus_per_trial must be a fraction in [0, 1] (0.25 packs 4 trials on a GPU) or a "
                             f"whole number of GPUs, got {g!r}")
        try:
            json.dumps(self.strategy_options, allow_nan=False)
        except (TypeError, ValueError):
            raise ValueError(f"strategy_options must be JSON data, got {self.strategy_options!r}") from None

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> RunConfig:
        """From a parsed config file (or flags), rejecting unknown keys by name."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"unknown config keys {unknown}; known: {sorted(names)}")
        values = dict(values)
        if values.get("recipe"):  # the recipe fills what was not given
            from nas.train.recipes import recipe_settings

            recipe = recipe_settings(values["recipe"])
            values = {**{k: v for k, v in recipe.items() if k in names}, **values,
                      "train_options": {**{k: v for k, v in recipe.items() if k not in names},
                                        **values.get("train_options", {})}}
        return cls(**values)

    def settings(self) -> Any:
        from nas.train.settings import TrainSettings

        known = {f.name for f in dataclasses.fields(TrainSettings)} - set(SETTINGS)
        if set(self.train_options) - known:
            raise ValueError(f"train_options {dict(self.train_options)!r} may only name {sorted(known)}")
        values = {k: getattr(self, k) for k in SETTINGS}
        values["objectives"] = tuple(self.objectives)
        return TrainSettings(**self.train_options, **values)

    def with_settings(self, settings: Any) -> RunConfig:
        """This config with the training settings of a :class:`nas.train.settings.TrainSettings` (those that are not
        fields of their own here, and differ from the defaults, go into ``train_options``)."""
        default = type(settings)()
        extra = {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)
                 if f.name not in SETTINGS and getattr(settings, f.name) != getattr(default, f.name)}
        values = {k: getattr(settings, k) for k in SETTINGS}
        values["objectives"] = list(settings.objectives)
        return dataclasses.replace(self, **values, train_options=extra)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_run_json(cls, saved: Mapping[str, Any]) -> RunConfig:
        """The config that ``run.json`` serializes (identity fields such as the space spec are not in it)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in saved.items() if k in names})


def _check_type(key: str, typ: str, value: Any) -> None:
    optional = typ.endswith(" | None")
    base = typ.removesuffix(" | None")
    if value is None and optional:
        return
    ok = {
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, (int, float)) and not isinstance(value, bool),
        "str": isinstance(value, str),
        "bool": isinstance(value, bool),
        "dict[str, Any]": isinstance(value, Mapping),
        "list[str]": isinstance(value, list | tuple) and all(isinstance(v, str) for v in value),
    }[base]
    if not ok:
        raise ValueError(f"config key {key!r} must be {_KIND[base]}{' or null' if optional else ''}, "
                         f"got {value!r} ({type(value).__name__})")


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str, sort_keys=True))


def run_differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Each defining field on which two ``run.json`` records differ, as ``key: run has X, this call Y``.

    >>> run_differences({"seed": 0, "lr": 0.1}, {"seed": 1, "lr": 0.1})
    ['seed: run has 0, this call 1']
    """
    defaults = RunConfig().to_json()  # a run from before a field existed had its default
    return [f"{k}: run has {saved.get(k, defaults.get(k))!r}, this call {current.get(k, defaults.get(k))!r}"
            for k in DEFINING if _plain(saved.get(k, defaults.get(k))) != _plain(current.get(k, defaults.get(k)))]
