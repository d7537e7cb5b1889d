"""The Python API: one call runs a whole search and returns its results as a pandas DataFrame.

>>> from nas.search_spaces.toy import ToySpace, toy_score
>>> from nas.trainer import ScoreTrainer
>>> import functools, tempfile
>>> df = search(ToySpace(), strategy="evolution", budget=30, executor="inprocess", seed=0,
...             strategy_options={"population": 10, "sample_size": 3},
...             trainer=functools.partial(ScoreTrainer, score_fn=toy_score),
...             run_dir=tempfile.mkdtemp())
>>> len(df), df["state"].unique().tolist()
(30, ['COMPLETE'])
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import inspect
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from nas import registry
from nas.data import Dataset, load_dataset
from nas.executor import Executor, InProcessExecutor
from nas.journal import Journal, RunDir, read_journal, results_frame
from nas.loop import Callback, SearchLoop
from nas.resume import STATE_FILE, SavedState, StopSignal, check_same_run, load_state
from nas.space import SearchSpace
from nas.status import monitoring_callbacks
from nas.strategy import Strategy
from nas.trainer import TorchTrainer, TrainerFactory, TrainSettings
from nas.types import Result, Trial

log = logging.getLogger(__name__)

EXECUTORS = ("ray", "inprocess")


@dataclasses.dataclass
class SearchConfig:
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
    seed: int = 0
    run_dir: str | None = None
    executor: str = "ray"
    address: str | None = None
    cpus_per_trial: float = 1.0
    gpus_per_trial: float = 0.0
    max_retries: int = 2
    device: str = "auto"
    amp: bool = True
    dashboard: bool = False

    def __post_init__(self) -> None:
        for name in ("budget", "workers", "epochs", "batch_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if self.executor not in EXECUTORS:
            raise ValueError(f"unknown executor {self.executor!r}; known: {', '.join(EXECUTORS)}")
        if not isinstance(self.strategy_options, Mapping):
            raise ValueError(f"strategy_options must be a mapping, got {self.strategy_options!r}")
        if not self.cpus_per_trial > 0:
            raise ValueError(f"cpus_per_trial must be > 0, got {self.cpus_per_trial!r}")
        if not (0 <= self.gpus_per_trial <= 1 or float(self.gpus_per_trial).is_integer() and self.gpus_per_trial > 1):
            raise ValueError(f"gpus_per_trial must be a fraction in [0, 1] (0.25 packs 4 trials on a GPU) or a "
                             f"whole number of GPUs, got {self.gpus_per_trial!r}")

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> SearchConfig:
        """From a parsed config file, rejecting unknown keys by name."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"unknown config keys {unknown}; known: {sorted(names)}")
        return cls(**dict(values))

    def settings(self) -> TrainSettings:
        return TrainSettings(epochs=self.epochs, lr=self.lr, batch_size=self.batch_size,
                             optimizer=self.optimizer, seed=self.seed, device=self.device, amp=self.amp)


def resolve_space(spec: str | SearchSpace) -> SearchSpace:
    """A space from a registered name (``nb201``) or an importable ``module:attr`` path, where attr is a
    SearchSpace instance, subclass, or a function returning one."""
    if isinstance(spec, SearchSpace):
        return spec
    if ":" in spec:
        module_name, _, attr = spec.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise ValueError(f"cannot import module {module_name!r} for space {spec!r}: {e}") from None
        try:
            obj = getattr(module, attr)
        except AttributeError:
            raise ValueError(f"module {module_name!r} has no attribute {attr!r}") from None
        space = obj() if callable(obj) and not isinstance(obj, SearchSpace) else obj
        if not isinstance(space, SearchSpace):
            raise ValueError(f"{spec!r} is a {type(space).__name__}, not a nas.SearchSpace")
        return space
    return registry.spaces.get(spec)()


def space_spec(space: SearchSpace) -> str:
    """How run.json names a space: its registered name, else ``module:Class``."""
    if space.registered_name and registry.spaces.names().count(space.registered_name):
        return space.registered_name
    return f"{type(space).__module__}:{type(space).__qualname__}"


def load_run(run_dir: str | os.PathLike[str], *, import_code: bool = True) -> tuple[dict[str, Any], pd.DataFrame]:
    """A run directory's config (run.json) and its trials, one row each in finishing order; architectures
    in the space's one-line form where the space resolves here, else as canonical JSON. With
    ``import_code=False`` only registered spaces format architectures (a ``module:attr`` space is not imported)."""
    cfg = RunDir(run_dir).config()
    try:
        if not import_code and ":" in str(cfg["space"]):
            raise LookupError("not importing user code")
        fmt = resolve_space(cfg["space"]).format
    except Exception:  # a custom space that does not import here
        fmt = None
    return cfg, results_frame(list(read_journal(run_dir)), fmt)


def load_results(run_dir: str | os.PathLike[str]) -> pd.DataFrame:
    """The results table of a run directory (see :func:`load_run`)."""
    return load_run(run_dir)[1]


def make_strategy(name: str, space: SearchSpace, *, seed: int | None = None,
                  options: Mapping[str, Any] | None = None) -> Strategy:
    """A registered strategy with its options checked by name before construction."""
    cls = registry.strategies.get(name)
    options = dict(options or {})
    params = inspect.signature(cls.__init__).parameters
    allowed = [p for p, v in params.items() if v.kind is inspect.Parameter.KEYWORD_ONLY and p != "seed"]
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"unknown options {unknown} for strategy {name!r}; allowed: {allowed}")
    return cls(space, seed=seed, **options)


def connect(address: str | None = None, *, num_cpus: int | None = None, dashboard: bool = False) -> None:
    """Join the Ray cluster at ``address`` (or ``RAY_ADDRESS``), or start a local one; no-op if
    Ray is already initialised in this process."""
    import ray

    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    else:
        ray.init(num_cpus=num_cpus, include_dashboard=dashboard, logging_level=logging.WARNING,
                 log_to_driver=False)


def default_run_dir(space: str, strategy: str) -> str:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return str(Path("runs") / f"{stamp}-{space.replace(':', '.')}-{strategy}")


def search(
    space: str | SearchSpace = "macro",
    strategy: str | Strategy = "evolution",
    *,
    budget: int = 24,
    workers: int = 2,
    data: str | Dataset = "digits",
    executor: str | Executor = "ray",
    trainer: TrainerFactory = TorchTrainer,
    settings: TrainSettings | None = None,
    strategy_options: Mapping[str, Any] | None = None,
    seed: int = 0,
    run_dir: str | os.PathLike[str] | None = None,
    address: str | None = None,
    cpus_per_trial: float = 1.0,
    gpus_per_trial: float = 0.0,
    max_retries: int = 2,
    callbacks: list[Callback] | None = None,
    resume: bool = False,
    stop: StopSignal | None = None,
) -> pd.DataFrame:
    """Run a search and return one row per finished trial (see :func:`nas.journal.results_frame`).

    ``space`` and ``strategy`` are objects or registered names; ``executor`` is ``"ray"`` (a pool of
    ``workers`` trainer actors on the local or given Ray cluster), ``"inprocess"``, or an Executor.
    The run directory (default ``runs/<time>-<space>-<strategy>``) holds the journal, the config and
    the best weights. ``df.attrs`` holds ``run_dir`` and the run's summary.

    ``resume=True`` continues the run in ``run_dir`` after a crash or an interrupt: pass the same
    space, strategy, options, seed, data and training settings (a difference is a ValueError naming
    it); ``budget`` may be raised. Finished trials come from the journal, the strategy from its saved
    state, and trials that were in flight run again under their own ids (see :mod:`nas.resume`).
    ``stop`` (a :class:`nas.resume.StopSignal`) ends the search gracefully when requested;
    ``df.attrs["interrupted"]`` then says so.
    """
    space_obj = resolve_space(space)
    strat = strategy if isinstance(strategy, Strategy) else make_strategy(
        strategy, space_obj, seed=seed, options=strategy_options)
    dataset = data if isinstance(data, Dataset) else load_dataset(data, seed=seed)
    settings = settings or TrainSettings(seed=seed)
    run = RunDir(run_dir or default_run_dir(space_spec(space_obj), strat.name))
    config = {
        "space": space_spec(space_obj), "strategy": strat.name, "strategy_options": dict(strategy_options or {}),
        "budget": budget, "workers": workers, "dataset": dataset.name, "seed": seed,
        "settings": dataclasses.asdict(settings), "created": datetime.datetime.now().isoformat(),
        "data": data if isinstance(data, str) else None,
        "executor": executor if isinstance(executor, str) else type(executor).__name__,
        "cpus_per_trial": cpus_per_trial, "gpus_per_trial": gpus_per_trial, "max_retries": max_retries,
    }
    journaled, saved = open_run(run, config, space_obj, resume=resume, given_run_dir=run_dir is not None)
    own_executor = not isinstance(executor, Executor)
    if isinstance(executor, Executor):
        ex = executor
    elif executor == "inprocess":
        ex = InProcessExecutor(space_obj, dataset, settings, trainer=trainer)
    elif executor == "ray":
        from nas.ray_executor import RayExecutor

        connect(address, num_cpus=None)
        ex = RayExecutor(space_obj, dataset, settings, workers=workers, trainer=trainer,
                         cpus_per_trial=cpus_per_trial, gpus_per_trial=gpus_per_trial,
                         max_retries=max_retries, namespace=f"nas-{run.path.name}")
    else:
        raise ValueError(f"unknown executor {executor!r}; known: {', '.join(EXECUTORS)}")
    try:
        with Journal(run) as journal:
            monitors = monitoring_callbacks(run.path, given=callbacks or [],
                                            ray_namespace=f"nas-{run.path.name}" if executor == "ray" else None)
            loop = SearchLoop(strat, ex, budget=budget, journal=journal, callbacks=[*(callbacks or []), *monitors],
                              best_weights=run.path / "best.pt", state_path=run.path / STATE_FILE, stop=stop,
                              checkpoint_dir=run.path / "checkpoints")
            loop.restore(journaled, saved)
            loop.run()
    finally:
        if own_executor:
            ex.shutdown()
    df = results_frame(loop.results(), space_obj.format)
    df.attrs["run_dir"] = str(run.path)
    df.attrs["summary"] = loop.summary()
    df.attrs["interrupted"] = loop.interrupted
    write_best(run, space_obj, loop)
    return df


def open_run(run: RunDir, config: dict[str, Any], space: SearchSpace, *, resume: bool,
             given_run_dir: bool) -> tuple[list[tuple[Trial, Result]], SavedState | None]:
    """Create the run directory, or (``resume``) check that ``config`` is the same search as the one
    there and load its journal and saved strategy state."""
    if not resume:
        run.create(config)
        return [], None
    if not given_run_dir:
        raise ValueError("resume=True needs the run_dir of the run to continue")
    prior = run.config()  # not a run directory, or an incompatible version: a clear error
    check_same_run(run, prior, config)
    journaled = list(read_journal(run.path))
    for trial, _ in journaled:
        try:
            space.validate(trial.arch)
        except ValueError as e:
            raise ValueError(f"cannot resume {str(run.path)!r}: its journal holds trial {trial.trial_id}, "
                             f"which is not in space {config['space']!r} ({e})") from None
    saved = load_state(run.path / STATE_FILE)
    run.write_config({**prior, "budget": config["budget"],
                      "resumed": [*prior.get("resumed", []), datetime.datetime.now().isoformat()]})
    return journaled, saved


def write_best(run: RunDir, space: SearchSpace, loop: SearchLoop) -> None:
    import json

    from nas.journal import atomic_write

    if loop.best is None:
        return
    trial, result = loop.best
    atomic_write(run.path / "best.json", json.dumps({
        "trial_id": trial.trial_id, "arch": dict(trial.arch), "arch_str": space.format(trial.arch),
        "score": result.score, "hparams": dict(trial.hparams), "metrics": result.metrics,
        "weights": "best.pt" if (run.path / "best.pt").exists() else None,
    }, indent=2, default=str).encode())
