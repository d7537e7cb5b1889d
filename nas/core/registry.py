"""Name -> class registries for strategies and search spaces, filled by decorators (as timm's models).

>>> reg = Registry("widget")
>>> @reg.register("spinner")
... class Spinner: ...
>>> reg.get("spinner") is Spinner
True
>>> reg.get("spiner")
Traceback (most recent call last):
...
ValueError: unknown widget 'spiner' (did you mean 'spinner'?); known: spinner
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from nas.core.nearest import did_you_mean

T = TypeVar("T")


class Registry(Generic[T]):
    """Names -> objects. ``builtins`` names the module that registers each built-in name: a name is known (listed,
    checked, suggested) without importing anything, and only the module of the name looked up is imported (a
    misspelt strategy is refused without loading torch for the RL controller)."""

    def __init__(self, kind: str, *, builtins: Mapping[str, str] | None = None) -> None:
        self.kind = kind
        self._builtins = dict(builtins or {})  # name -> module, imported on the name's first lookup
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """A decorator registering its class (or function) as ``name``: a non-empty name without ':' or spaces, which
        the command line's ``module:Class`` and a listing's columns keep apart (``register(3)`` broke every later
        search's listing of names)."""
        if not isinstance(name, str) or not name or ":" in name or name != "".join(name.split()):
            raise ValueError(f"a {self.kind} is registered under a name, a non-empty string without ':' or spaces; "
                             f"got {name!r}")

        def add(obj: T) -> T:
            if name in self._entries and self._entries[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            try:
                setattr(obj, "registered_name", name)  # noqa: B010
            except (AttributeError, TypeError):
                raise TypeError(f"{self.kind} {name!r}: {obj!r} cannot be registered (it takes no attributes); "
                                f"register a class of your own") from None
            self._entries[name] = obj
            return obj

        return add

    def names(self) -> list[str]:
        """Every registered name, built-ins included (nothing is imported)."""
        return sorted({*self._builtins, *self._entries})

    def check(self, name: str) -> None:
        """A one-line ValueError (with the nearest known name) unless ``name`` is registered; nothing is imported."""
        if name not in self._entries and name not in self._builtins:
            raise ValueError(f"unknown {self.kind} {name!r}{did_you_mean(name, self.names())}; "
                             f"known: {', '.join(self.names())}")

    def get(self, name: str) -> T:
        """What ``name`` is registered as (a built-in's module imported first); ValueError for an unknown name."""
        self.check(name)
        if name not in self._entries:
            importlib.import_module(self._builtins[name])
            if name not in self._entries:
                raise ValueError(f"module {self._builtins[name]!r} did not register {self.kind} {name!r}")
        return self._entries[name]

    def items(self) -> list[tuple[str, T]]:
        """Every (name, object), every built-in's module imported."""
        return [(name, self.get(name)) for name in self.names()]


def _builtins(package: str, modules: Mapping[str, str]) -> dict[str, str]:
    return {name: f"{package}.{module}" for name, module in modules.items()}


#: the built-in strategies (``strategies/``), spaces (``search_spaces/``) and schedulers (``nas/schedulers/``):
#: each name with the module that registers it; a test checks that each module registers exactly these
strategies: Registry[Any] = Registry("strategy", builtins=_builtins("nas.strategies", {
    "evolution": "evolution", "local": "local", "optuna": "optuna_sampler", "pbt": "pbt", "predictor": "predictor",
    "random": "random", "rl": "rl"}))
spaces: Registry[Any] = Registry("search space", builtins=_builtins("nas.search_spaces", {
    "macro": "macro", "nb201": "nb201", "toy": "toy"}))
schedulers: Registry[Any] = Registry("scheduler", builtins=_builtins("nas.schedulers", {
    "asha": "asha", "hyperband": "hyperband", "median": "median", "none": "none"}))

register_strategy = strategies.register
register_space = spaces.register
register_scheduler = schedulers.register
#: executors by name (``ray``, ``inprocess``, ``simulated``): classes with ``from_config(ExecutorConfig)``
executors: Registry[Any] = Registry("executor", builtins=_builtins("nas.engine", {
    "inprocess": "inprocess", "ray": "ray_pool", "simulated": "simulated"}))
register_executor = executors.register
#: tabular benchmarks by name (``nb201-cifar10``, ...): factories ``() -> benchmark`` that the simulated executor
#: (``nas.engine.simulated``) is handed the result of
tables: Registry[Any] = Registry("tabular benchmark", builtins=_builtins("nas.engine.tabular", {
    f"nb201-{dataset}": "nb201_table" for dataset in ("cifar10", "cifar100", "imagenet16")}))
register_table = tables.register
