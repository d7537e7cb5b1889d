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
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from nas.core.nearest import did_you_mean

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str, *, modules: tuple[str, ...] = ()) -> None:
        self.kind = kind
        self._modules = modules  # imported on first lookup, so built-ins register themselves
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def add(obj: T) -> T:
            if name in self._entries and self._entries[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = obj
            setattr(obj, "registered_name", name)  # noqa: B010
            return obj

        return add

    def _load(self) -> None:
        modules, self._modules = self._modules, ()
        for module in modules:
            importlib.import_module(module)

    def names(self) -> list[str]:
        self._load()
        return sorted(self._entries)

    def get(self, name: str) -> T:
        self._load()
        try:
            return self._entries[name]
        except KeyError:
            raise ValueError(f"unknown {self.kind} {name!r}{did_you_mean(name, self.names())}; "
                             f"known: {', '.join(self.names())}") from None

    def items(self) -> list[tuple[str, T]]:
        self._load()
        return sorted(self._entries.items())


strategies: Registry[Any] = Registry("strategy", modules=("nas.strategies",))
spaces: Registry[Any] = Registry("search space", modules=("nas.search_spaces",))
schedulers: Registry[Any] = Registry("scheduler", modules=("nas.schedulers",))

register_strategy = strategies.register
register_space = spaces.register
register_scheduler = schedulers.register
#: executors by name (``ray``, ``inprocess``, ``simulated``): classes with ``from_config(ExecutorConfig)``
executors: Registry[Any] = Registry("executor", modules=(
    "nas.engine.inprocess", "nas.engine.ray_pool", "nas.engine.simulated"))
register_executor = executors.register
#: tabular benchmarks by name (``nb201-cifar10``, ...): factories ``() -> benchmark`` that the simulated executor
#: (``nas.engine.simulated``) is handed the result of
tables: Registry[Any] = Registry("tabular benchmark", modules=("nas.engine.tabular.nb201_table",))
register_table = tables.register
