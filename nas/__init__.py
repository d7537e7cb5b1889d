"""Parallel neural architecture search on Ray.

The pieces: :class:`SearchSpace` (what can be built), :class:`Strategy` (what to try next), executors
(where it trains), a training function ``train(ctx)`` (how one candidate trains: :class:`TrialContext`),
:class:`SearchLoop` (keeps every worker busy), and :func:`search` (all of it at once).

This module is the package's only alias surface. The names below are imported on first use (PEP 562), so a
Ray worker that only needs ``nas.core.types`` (a light actor of the executor benchmarks) never loads torch or
pandas.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nas.api import SearchConfig, connect, load_results, load_run, make_strategy, resolve_space, search
    from nas.core.front import hypervolume, pareto_front
    from nas.core.registry import register_space, register_strategy
    from nas.core.space import SearchSpace, Task
    from nas.core.strategy import Strategy
    from nas.core.types import (
        Arch,
        Decision,
        FailureKind,
        InvalidArchitecture,
        InvalidSpace,
        Outcome,
        Report,
        Result,
        SupernetChanged,
        Trial,
        TrialState,
        arch_hash,
        arch_key,
    )
    from nas.engine.inprocess import InProcessExecutor
    from nas.engine.interfaces import Callback, LoopStatus
    from nas.engine.loop import SearchLoop
    from nas.engine.protocol import Executor
    from nas.oneshot import retrain, train_supernet
    from nas.run.config import RunConfig
    from nas.train.context import TrialContext
    from nas.train.data import Dataset, load_dataset
    from nas.train.fit import fit
    from nas.train.settings import TrainSettings
    from nas.train.simple import scored, sleeping

__version__ = "0.1.0"

_WHERE = {
    "nas.api": ["SearchConfig", "connect", "load_results", "load_run", "make_strategy", "resolve_space", "search"],
    "nas.core.front": ["hypervolume", "pareto_front"],
    "nas.core.registry": ["register_space", "register_strategy"],
    "nas.core.space": ["SearchSpace", "Task"],
    "nas.core.strategy": ["Strategy"],
    "nas.core.types": ["Arch", "Decision", "FailureKind", "InvalidArchitecture", "InvalidSpace", "Outcome", "Report",
                       "Result", "SupernetChanged", "Trial", "TrialState", "arch_hash", "arch_key"],
    "nas.engine.inprocess": ["InProcessExecutor"],
    "nas.engine.interfaces": ["Callback", "LoopStatus"],
    "nas.engine.loop": ["SearchLoop"],
    "nas.engine.protocol": ["Executor"],
    "nas.oneshot": ["retrain", "train_supernet"],
    "nas.run.config": ["RunConfig"],
    "nas.train.context": ["TrialContext"],
    "nas.train.data": ["Dataset", "load_dataset"],
    "nas.train.fit": ["fit"],
    "nas.train.settings": ["TrainSettings"],
    "nas.train.simple": ["scored", "sleeping"],
}
_MODULE_OF = {name: module for module, names in _WHERE.items() for name in names}
__all__ = ["Arch", "Callback", "Dataset", "Decision", "Executor", "FailureKind", "InProcessExecutor",
    "InvalidArchitecture", "InvalidSpace", "LoopStatus", "Outcome", "Report", "Result", "RunConfig", "SearchConfig",
    "SearchLoop", "SearchSpace", "Strategy", "SupernetChanged", "Task", "TrainSettings", "Trial", "TrialContext",
    "TrialState", "arch_hash", "arch_key", "connect", "fit", "hypervolume", "load_dataset", "load_results", "load_run",
    "make_strategy", "pareto_front", "register_space", "register_strategy", "resolve_space", "retrain", "scored",
    "search", "sleeping", "train_supernet"]
assert __all__ == sorted(_MODULE_OF)


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
