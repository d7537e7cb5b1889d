"""Parallel neural architecture search on Ray.

The pieces: :class:`SearchSpace` (what can be built), :class:`Strategy` (what to try next), executors
(where it trains), :class:`SearchLoop` (keeps every worker busy), and :func:`search` (all of it at once).

The names below are imported on first use (PEP 562), so a Ray worker that only needs ``nas.core.types``
(a light actor of the executor benchmarks) never loads torch or pandas.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nas.api import SearchConfig, connect, load_results, load_run, make_strategy, resolve_space, search
    from nas.core.front import hypervolume, pareto_front
    from nas.core.registry import register_space, register_strategy
    from nas.core.space import InvalidArchitecture, InvalidSpace, SearchSpace, Task
    from nas.core.strategy import Strategy
    from nas.core.types import Arch, Decision, Result, Trial, TrialState, arch_hash, arch_key
    from nas.engine.inprocess import InProcessExecutor
    from nas.engine.loop import Callback, SearchLoop
    from nas.engine.protocol import Executor
    from nas.train.data import Dataset, load_dataset
    from nas.train.trainer import ScoreTrainer, SleepTrainer, TorchTrainer, TrainSettings

__version__ = "0.1.0"

_WHERE = {
    "nas.api": ["SearchConfig", "connect", "load_results", "load_run", "make_strategy", "resolve_space", "search"],
    "nas.core.front": ["hypervolume", "pareto_front"],
    "nas.train.data": ["Dataset", "load_dataset"],
    "nas.engine.inprocess": ["InProcessExecutor"],
    "nas.engine.protocol": ["Executor"],
    "nas.engine.loop": ["Callback", "SearchLoop"],
    "nas.core.registry": ["register_space", "register_strategy"],
    "nas.core.space": ["InvalidArchitecture", "InvalidSpace", "SearchSpace", "Task"],
    "nas.core.strategy": ["Strategy"],
    "nas.train.trainer": ["ScoreTrainer", "SleepTrainer", "TorchTrainer", "TrainSettings"],
    "nas.core.types": ["Arch", "Decision", "Result", "Trial", "TrialState", "arch_hash", "arch_key"],
}
_MODULE_OF = {name: module for module, names in _WHERE.items() for name in names}

__all__ = [
    "Arch", "Callback", "Dataset", "Decision", "Executor", "InProcessExecutor", "InvalidArchitecture",
    "InvalidSpace", "Result", "ScoreTrainer", "SearchConfig", "SearchLoop", "SearchSpace", "SleepTrainer",
    "Strategy", "Task", "TorchTrainer", "TrainSettings", "Trial", "TrialState", "arch_hash", "arch_key",
    "connect", "load_dataset", "load_results", "load_run", "make_strategy", "register_space", "register_strategy",
    "resolve_space", "search",
    "hypervolume", "pareto_front",
]
assert sorted(__all__) == sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    if name in _MODULE_OF:
        value = getattr(importlib.import_module(_MODULE_OF[name]), name)
    else:  # a submodule, e.g. nas.api after a bare ``import nas``
        try:
            value = importlib.import_module(f"nas.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"nas.{name}":
                raise
            raise AttributeError(f"module 'nas' has no attribute {name!r}") from None
    globals()[name] = value
    return value
