"""Parallel neural architecture search on Ray.

The pieces: :class:`SearchSpace` (what can be built), :class:`Strategy` (what to try next), executors
(where it trains), :class:`SearchLoop` (keeps every worker busy), and :func:`search` (all of it at once).
"""

from nas.api import SearchConfig, connect, load_results, load_run, make_strategy, resolve_space, search
from nas.data import Dataset, load_dataset
from nas.executor import Executor, InProcessExecutor
from nas.loop import Callback, SearchLoop
from nas.registry import register_space, register_strategy
from nas.space import InvalidArchitecture, InvalidSpace, SearchSpace, Task
from nas.strategy import Strategy
from nas.trainer import ScoreTrainer, SleepTrainer, TorchTrainer, TrainSettings
from nas.types import Arch, Decision, Result, Trial, TrialState, arch_hash, arch_key

__version__ = "0.1.0"

__all__ = [
    "Arch", "Callback", "Dataset", "Decision", "Executor", "InProcessExecutor", "InvalidArchitecture",
    "InvalidSpace", "Result", "ScoreTrainer", "SearchConfig", "SearchLoop", "SearchSpace", "SleepTrainer",
    "Strategy", "Task", "TorchTrainer", "TrainSettings", "Trial", "TrialState", "arch_hash", "arch_key",
    "connect", "load_dataset", "load_results", "load_run", "make_strategy", "register_space", "register_strategy",
    "resolve_space", "search",
]
