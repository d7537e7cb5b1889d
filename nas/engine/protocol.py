"""The executor contract: one Protocol, the events executors report, the configuration every registered
executor is built from, and the measured rule that decides whether to prefetch.

An executor runs trials on workers; the loop (:class:`nas.engine.loop.SearchLoop`) submits trials while
``free_slots() > 0`` and turns what ``poll`` returns into trial states. ``poll`` returns
:class:`Event` objects in the order they happened: for each trial a ``started`` (it began running on a
worker), then ``report`` events (intermediate results, one per epoch, as they happen), then one
``finished`` with the final :class:`nas.core.types.Result`. A trial that never got to a worker (stopped while
queued, a checkpoint it needed was gone) may finish without having started.

Reports and decisions: a ``report`` event carries the epoch, the metrics and ``score`` (the run's first
objective, higher is better; None where the report lacks it). The loop answers a report by calling
``decide(trial_id, decision)`` only when the decision is not CONTINUE: STOP ends the trial as COMPLETE
with its last report as the result (reason ``STOPPED``), PAUSE ends it likewise, keeping its checkpoint
(reason ``PAUSED``). A decision reaches the worker before it reports again, so a stop lands within one
epoch; at the epochs given to ``decision_epochs`` (a scheduler's rungs) the worker waits for the loop's
answer before it trains on, so a stop or pause there lands at once. A promoted trial is submitted again
under its own id with ``checkpoint_from`` = its id (a continuation from its kept checkpoint).

Executors register by name in :data:`nas.core.registry.executors` and are built from one
:class:`ExecutorConfig` by their ``from_config`` classmethod, so the CLI and the API pick them by name:

>>> from nas.search_spaces.toy import ToySpace, toy_score
>>> from nas.train.trainer import ScoreTrainer
>>> import functools
>>> ex = build_executor("inprocess", ExecutorConfig(
...     ToySpace(), trainer=functools.partial(ScoreTrainer, score_fn=toy_score)))
>>> ex.submit(Trial(0, {"d0": 3, "d1": 1, "d2": 4, "d3": 2, "d4": 3}))
>>> [e.kind.value for e in ex.poll()]
['started', 'finished']
"""

from __future__ import annotations

import collections
import dataclasses
import statistics
from collections.abc import Collection, Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from nas.core import registry
from nas.core.types import Decision, Result, Trial, TrialState  # noqa: F401 (the doctests use TrialState)

if TYPE_CHECKING:
    from nas.core.space import SearchSpace
    from nas.train.data import Dataset
    from nas.train.trainer import TrainerFactory, TrainSettings


class EventKind(StrEnum):
    STARTED = "started"  # the trial began running on a worker (it was QUEUED before, RUNNING after)
    REPORT = "report"  # an intermediate result (one epoch's metrics), sent by the worker as it happened
    FINISHED = "finished"  # the final result: COMPLETE or FAILED
    REQUEUED = "requeued"  # it stopped running without a result (its worker died) and waits to run again


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    """What an executor tells the loop about one trial. ``time``: when it happened on the worker (the
    executor's clock: simulated seconds for a simulated executor, else ``time.time()``); ``worker``:
    where. ``result`` is set for ``finished``; ``epoch`` and ``metrics`` for ``report``.

    >>> Event.started(Trial(3, {"x": 1}), worker="w0").kind
    <EventKind.STARTED: 'started'>
    """

    kind: EventKind
    trial: Trial
    result: Result | None = None
    epoch: int | None = None
    metrics: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    time: float | None = None
    worker: str | None = None
    score: float | None = None

    @classmethod
    def started(cls, trial: Trial, *, time: float | None = None, worker: str | None = None) -> Event:
        return cls(EventKind.STARTED, trial, time=time, worker=worker)

    @classmethod
    def report(cls, trial: Trial, epoch: int, metrics: Mapping[str, Any], *, score: float | None = None,
               time: float | None = None, worker: str | None = None) -> Event:
        return cls(EventKind.REPORT, trial, epoch=epoch, metrics=dict(metrics), time=time, worker=worker,
                   score=score)

    @classmethod
    def finished(cls, trial: Trial, result: Result) -> Event:
        return cls(EventKind.FINISHED, trial, result=result, time=result.end_time, worker=result.worker)


@runtime_checkable
class Executor(Protocol):
    """What the loop needs of an executor (ray, inprocess, simulated; see :data:`nas.core.registry.executors`).

    ``slots``: workers; ``free_slots()``: trials it takes now (more than ``slots`` minus those in flight
    when it prefetches); ``submit`` never blocks; ``poll(timeout)`` waits at most ``timeout`` seconds
    for events and returns them in order (possibly none); ``stop`` cancels a trial, which then
    finishes FAILED ("stopped"); ``checkpoint`` gives a finished trial's saved state while kept;
    ``now()`` is the executor's clock when simulated, None for wall-clock executors."""

    checkpoint_keep: int

    @property
    def slots(self) -> int: ...
    def free_slots(self) -> int: ...
    def in_flight(self) -> int: ...
    def submit(self, trial: Trial) -> None: ...
    def poll(self, timeout: float | None = None) -> list[Event]: ...
    def stop(self, trial_id: int) -> None: ...
    def decide(self, trial_id: int, decision: Decision) -> None: ...
    def decision_epochs(self, epochs: Collection[int]) -> None: ...
    def checkpoint(self, trial_id: int) -> bytes | None: ...
    def restore_checkpoint(self, trial_id: int, data: bytes) -> None: ...
    def now(self) -> float | None: ...
    def shutdown(self) -> None: ...


@dataclasses.dataclass
class ExecutorConfig:
    """Everything a registered executor may be built from; each takes what it uses. ``options`` are
    executor-specific (ray: ``prefetch``, ``start_timeout``; simulated: ``benchmark`` (an object with
    ``query``/``epochs`` or a name in ``nas.core.registry.tables``), ``noise``, ``round_trip``, ``prefetch``)."""

    space: SearchSpace
    data: Dataset | None = None
    settings: TrainSettings | None = None
    workers: int = 1
    trainer: TrainerFactory | None = None  # None: TorchTrainer
    cpus_per_trial: float = 1.0
    gpus_per_trial: float = 0.0
    max_retries: int = 2
    namespace: str | None = None
    seed: int | None = None
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def checked_options(self, executor: str, *allowed: str) -> dict[str, Any]:
        """``options``, after checking that each is one ``executor`` takes (a ValueError names the rest)."""
        unknown = sorted(set(self.options) - set(allowed))
        if unknown:
            raise ValueError(f"unknown options {unknown} for executor {executor!r}; allowed: {list(allowed)}")
        return dict(self.options)


@dataclasses.dataclass(frozen=True)
class KeepRule:
    """Whether a finished trial's checkpoint is kept: when a strategy asked for it (``save``: PBT, a promotion,
    weight inheritance), or when its score beats ``above`` (the best so far: it may become the run's best,
    whose weights are exported). Checkpoints no one will use are never made. A paused trial's always is.

    >>> rule = KeepRule(save=False, above=0.9)
    >>> rule(Result(0, TrialState.COMPLETE, score=0.8)), rule(Result(1, TrialState.COMPLETE, score=0.95))
    (False, True)
    """

    save: bool = False
    above: float | None = None

    def __call__(self, result: Result) -> bool:
        if self.save:
            return True
        return result.ok and result.score is not None and (self.above is None or result.score > self.above)


def finished(events: list[Event]) -> list[tuple[Trial, Result]]:
    """The (trial, final result) pairs among ``events``, in order, for code that only needs those."""
    return [(e.trial, e.result) for e in events if e.result is not None]


def build_executor(name: str, config: ExecutorConfig) -> Executor:
    """The executor registered as ``name``, built from ``config`` (a ValueError names unknown ones)."""
    return registry.executors.get(name).from_config(config)  # type: ignore[no-any-return]


class PrefetchRule:
    """Whether to queue a trial at a worker behind the one it runs, decided from measurements.

    Without prefetch a worker waits one round trip per trial: its result travels to the driver, is
    journaled and told, the strategy asks, the next trial travels back. With prefetch it never waits,
    but the queued trial was decided before the running one finished: the strategy sees up to twice
    as many trials outstanding, which makes evolution and RL decide on staler information. So the rule
    (``mode="auto"``): prefetch while the running median trial duration (of the last ``window``
    results) is below ``ratio`` x the median round trip, i.e. while waiting would cost a worker more
    than about 1 / (1 + ratio) of its time (5 % at the default 20); never before ``min_samples``
    durations are known. ``mode`` True or False forces it.

    >>> rule = PrefetchRule()
    >>> rule.observe_round_trip(0.004)
    >>> for _ in range(3): rule.observe_duration(0.010)   # 10 ms trials, 4 ms round trip
    >>> rule.on
    True
    >>> for _ in range(64): rule.observe_duration(120.0)  # two-minute trials: decide on fresh results
    >>> rule.on
    False
    """

    def __init__(self, mode: bool | str = "auto", *, ratio: float = 20.0, window: int = 64,
                 min_samples: int = 3) -> None:
        if mode not in (True, False, "auto"):
            raise ValueError(f"prefetch must be 'auto', True or False, got {mode!r}")
        if not ratio > 0:
            raise ValueError(f"prefetch ratio must be > 0, got {ratio!r}")
        self.mode, self.ratio, self.min_samples = mode, float(ratio), min_samples
        self._durations: collections.deque[float] = collections.deque(maxlen=window)
        self._round_trips: collections.deque[float] = collections.deque(maxlen=window)
        self._on = mode is True

    def observe_duration(self, seconds: float) -> None:
        self._durations.append(max(0.0, seconds))
        self._decide()

    def observe_round_trip(self, seconds: float) -> None:
        self._round_trips.append(max(0.0, seconds))
        self._decide()

    @property
    def median_duration(self) -> float | None:
        return statistics.median(self._durations) if self._durations else None

    @property
    def median_round_trip(self) -> float | None:
        return statistics.median(self._round_trips) if self._round_trips else None

    def _decide(self) -> None:
        if self.mode != "auto":
            return
        d, rt = self.median_duration, self.median_round_trip
        self._on = (len(self._durations) >= self.min_samples and d is not None and rt is not None
                    and d < self.ratio * rt)

    @property
    def on(self) -> bool:
        return self._on

    def describe(self) -> dict[str, Any]:
        return {"mode": self.mode, "on": self.on, "median_duration": self.median_duration,
                "median_round_trip": self.median_round_trip, "ratio": self.ratio}


__all__ = ["Event", "EventKind", "Executor", "ExecutorConfig", "KeepRule", "PrefetchRule", "build_executor",
           "finished"]
