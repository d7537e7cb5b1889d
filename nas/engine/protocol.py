"""The executor contract: one Protocol with what the loop uses, the events executors report, the small
checkpoint store each executor keeps, the configuration every registered executor is built from, and the
measured rule that decides whether to prefetch.

An executor runs trials on workers; the loop (:class:`nas.engine.loop.SearchLoop`) submits trials while
``free_slots() > 0`` and turns what ``poll`` returns into trial states. ``poll`` returns :class:`Event`
objects in the order they happened: for each trial a ``started`` (it began running on a worker), then
``report`` events (intermediate results, one per epoch, as they happen), then one ``finished`` with the
final :class:`nas.core.types.Result`. A trial that never got to a worker (cancelled while queued, a
checkpoint it needed was gone) may finish without having started.

Reports and decisions: a ``report`` event carries a :class:`nas.core.types.Report` (epoch, metrics, and
``score``, the run's first objective, higher is better). The loop answers a report only when the answer is
not to continue, with ``stop(trial_id, outcome)``: STOPPED ends the trial with its last report as the result,
PAUSED likewise keeping its checkpoint (a promotion may continue it), CANCELLED (the driver's stop request)
ends it without a result. A decision reaches the worker before it reports again, so a stop lands within one
epoch; at the epochs given with the trial (``wait_epochs``: a scheduler's rungs) the worker waits for the
loop's answer before it trains on, so a stop or pause there lands at once. A promoted trial is submitted again
under its own id with ``checkpoint_from`` = its id (a continuation from its kept checkpoint).

Executors register by name in :data:`nas.core.registry.executors`; a registered class has
``from_config(ExecutorConfig)`` and says with ``needs_ray`` whether the API must connect to Ray first:

>>> from nas.search_spaces.toy import ToySpace, toy_score
>>> from nas.train.simple import scored
>>> ex = build_executor("inprocess", ExecutorConfig(ToySpace(), train=scored(toy_score)))
>>> ex.submit(Trial(0, {"d0": 3, "d1": 1, "d2": 4, "d3": 2, "d4": 3}), keep=KeepRule())
>>> [e.kind.value for e in ex.poll()], [e.kind.value for e in ex.poll()]
(['started', 'report'], ['finished'])
"""

from __future__ import annotations

import collections
import dataclasses
import math
import statistics
from collections.abc import Callable, Collection, Mapping, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from nas.core import registry
from nas.core.nearest import did_you_mean
from nas.core.types import Outcome, Report, Result, Trial

if TYPE_CHECKING:
    from nas.core.space import SearchSpace
    from nas.train.context import TrialContext
    from nas.train.data import Dataset
    from nas.train.settings import TrainSettings

#: how a data-parallel gang's ranks are placed (Ray placement-group strategies; see :mod:`nas.engine.gang_executor`)
GANG_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")

TrainFn = Callable[["TrialContext"], Any]
"""A training function ``train(ctx)``: the one trial contract (:mod:`nas.train.context`)."""


class EventKind(StrEnum):
    STARTED = "started"  # the trial began running on a worker (it was QUEUED before, RUNNING after)
    REPORT = "report"  # an intermediate result (one epoch's metrics), sent by the worker as it happened
    FINISHED = "finished"  # the final result
    REQUEUED = "requeued"  # it stopped running without a result (its worker died) and waits to run again


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    """What an executor tells the loop about one trial. ``time``: when it happened on the worker (the
    executor's clock: simulated seconds for a simulated executor, else ``time.time()``); ``worker``:
    where. ``result`` is set for ``finished``, ``report`` for ``report``.

    >>> Event.started(Trial(3, {"x": 1}), worker="w0").kind
    <EventKind.STARTED: 'started'>
    """

    kind: EventKind
    trial: Trial
    result: Result | None = None
    report: Report | None = None
    time: float | None = None
    worker: str | None = None

    @classmethod
    def started(cls, trial: Trial, *, time: float | None = None, worker: str | None = None) -> Event:
        return cls(EventKind.STARTED, trial, time=time, worker=worker)

    @classmethod
    def reported(cls, trial: Trial, report: Report) -> Event:
        return cls(EventKind.REPORT, trial, report=report, time=report.time, worker=report.worker)

    @classmethod
    def finished(cls, trial: Trial, result: Result) -> Event:
        return cls(EventKind.FINISHED, trial, result=result, time=result.end_time, worker=result.worker)

    @classmethod
    def requeued(cls, trial: Trial, *, worker: str | None = None) -> Event:
        return cls(EventKind.REQUEUED, trial, worker=worker)


@dataclasses.dataclass(frozen=True, slots=True)
class KeepRule:
    """Whether a finished trial's checkpoint is kept: when a strategy asked for it (``save``: PBT, a promotion,
    weight inheritance), or when its score beats ``above`` (the best so far: it may become the run's best,
    whose weights are exported). Checkpoints no one will use are never made. A paused trial's always is.

    >>> rule = KeepRule(save=False, above=0.9)
    >>> rule(Result(0, Outcome.COMPLETE, score=0.8)), rule(Result(1, Outcome.COMPLETE, score=0.95))
    (False, True)
    """

    save: bool = False
    above: float | None = None

    def __call__(self, result: Result) -> bool:
        if self.save or result.outcome is Outcome.PAUSED:
            return True
        return result.ok and result.score is not None and (self.above is None or result.score > self.above)


@runtime_checkable
class Checkpoints(Protocol):
    """The checkpoints an executor keeps of finished trials, for trials that start from them (``checkpoint_from``:
    a promotion, PBT's exploit; ``inherit_from``: weight inheritance) and for the run directory's owner, which
    writes them to disk (:class:`nas.run.store.RunStore`): ``get`` the bytes of one while kept (None otherwise),
    ``put`` one back (read from the run directory on resume, or an earlier run's on a warm start). At most
    ``keep`` are kept; past it the one ``victim`` names goes (given the kept trial ids, oldest first: the loop sets
    a pausing scheduler's :meth:`nas.core.scheduler.Scheduler.expendable`, else the strategy's
    :meth:`nas.core.strategy.Strategy.expendable`), else the oldest."""

    keep: int
    victim: Callable[[Sequence[int]], int | None] | None

    def get(self, trial_id: int) -> bytes | None: ...
    def put(self, trial_id: int, data: bytes) -> None: ...
    def __contains__(self, trial_id: object) -> bool: ...


class BoundedCheckpoints:
    """A bounded map trial id -> checkpoint (bytes, or whatever ``fetch`` turns into bytes: a Ray ObjectRef),
    oldest evicted first. Executors keep theirs here; :meth:`get` is :class:`Checkpoints`' view of it.

    >>> c = BoundedCheckpoints(keep=2)
    >>> for i in range(3): c.put(i, bytes([i]))
    >>> c.get(0), c.get(2), 0 in c
    (None, b'\\x02', False)
    """

    def __init__(self, keep: int = 256, fetch: Callable[[Any], bytes | None] | None = None) -> None:
        self.keep = keep
        self.victim: Callable[[Sequence[int]], int | None] | None = None
        self._fetch = fetch
        self._items: collections.OrderedDict[int, Any] = collections.OrderedDict()

    def put(self, trial_id: int, data: Any) -> None:
        if data is None:
            return
        self._items[trial_id] = data
        self._items.move_to_end(trial_id)  # (a promoted trial's new checkpoint is the newest)
        while len(self._items) > self.keep:
            # (never the one just put: its weights may be written as the best's right after)
            chosen = self.victim(list(self._items)[:-1]) if self.victim is not None else None
            del self._items[chosen if chosen is not None and chosen in self._items else next(iter(self._items))]

    def handle(self, trial_id: int | None) -> Any:
        """What a worker is handed for ``trial_id`` (None for None); a KeyError names an evicted one."""
        if trial_id is None:
            return None
        if trial_id not in self._items:
            raise KeyError(f"no checkpoint is kept for trial {trial_id}")
        return self._items[trial_id]

    def inheritable(self, trial_id: int | None) -> Any:
        """What a worker is handed to inherit weights from (:meth:`handle`), or None where none is kept: inheriting
        is a head start, not a need, so a child whose parent's weights are gone (evicted, or a warm-start trial whose
        run kept none) trains from scratch; every child of such a parent failed as CHECKPOINT_MISSING."""
        return None if trial_id is None else self._items.get(trial_id)

    def get(self, trial_id: int) -> bytes | None:
        item = self._items.get(trial_id)
        if item is None or self._fetch is None:
            return item  # type: ignore[no-any-return]
        return self._fetch(item)

    def __contains__(self, trial_id: object) -> bool:
        return trial_id in self._items


@runtime_checkable
class Executor(Protocol):
    """Everything the loop uses of an executor (ray, inprocess, simulated; see :data:`nas.core.registry.executors`).

    - ``slots``: workers (trials that run at once);
    - ``free_slots()``: trials it takes now (more than ``slots`` minus those in flight when it prefetches);
    - ``submit(trial, keep=, wait_epochs=)``: never blocks; ``keep`` says whether the trial's checkpoint comes
      back, ``wait_epochs`` where its worker waits for the loop's answer to a report;
    - ``poll(timeout)``: waits at most ``timeout`` seconds for events and returns them in order (possibly none);
    - ``stop(trial_id, outcome)``: end a trial as STOPPED or PAUSED (at its last report) or CANCELLED;
    - ``checkpoints``: the finished trials' kept checkpoints (:class:`Checkpoints`);
    - ``now()``: the executor's clock when simulated, None for wall-clock executors;
    - ``shutdown()``: release the workers.
    """

    @property
    def checkpoints(self) -> Checkpoints: ...
    @property
    def slots(self) -> int: ...
    def free_slots(self) -> int: ...
    def submit(self, trial: Trial, *, keep: KeepRule, wait_epochs: Collection[int] = ()) -> None: ...
    def poll(self, timeout: float | None = None) -> list[Event]: ...
    def stop(self, trial_id: int, outcome: Outcome) -> None: ...
    def now(self) -> float | None: ...
    def shutdown(self) -> None: ...


@runtime_checkable
class SimulatedClock(Protocol):
    """An executor on a simulated clock (:meth:`Executor.now` is not None), resumed: ``resume_at(time, ended)``,
    before any trial is submitted, makes its clock go on from the last time the run's journal holds (so a resumed
    run's times stay in order and its ``time_budget`` counts the simulated time already spent) and tells it how each
    trial that finished ended (trial id -> its last result's outcome and epoch: a paused one may be promoted). The
    trials in flight at the crash start again at that time: with several workers the rest of the run can differ from
    an uninterrupted one's, whose in-flight trials had started earlier."""

    def resume_at(self, time: float, ended: Mapping[int, tuple[Outcome, int]]) -> None: ...


class ExecutorClass(Protocol):
    """What the registry holds: an executor class built from an :class:`ExecutorConfig`; ``needs_ray`` says
    whether the API must connect to (or start) a Ray cluster before building it."""

    needs_ray: ClassVar[bool]

    @classmethod
    def from_config(cls, cfg: ExecutorConfig) -> Executor: ...


@dataclasses.dataclass
class ExecutorConfig:
    """Everything a registered executor may be built from; each takes what it uses. ``train``: the training
    function every trial runs (None: the built-in :func:`nas.train.fit.fit`). ``trial_workers``: processes that
    train each trial data-parallel (ray: above 1, ``workers`` gangs of that many ranks placed by ``gang_strategy``,
    :mod:`nas.engine.gang_executor`). ``options`` are executor-specific (ray: ``prefetch``, ``start_timeout``;
    with gangs
    ``start_timeout``, ``collective_timeout``; simulated: ``benchmark`` (an object with ``query``/``epochs`` or a
    name in ``nas.core.registry.tables``), ``noise``, ``round_trip``, ``prefetch``)."""

    space: SearchSpace
    data: Dataset | None = None
    settings: TrainSettings | None = None
    workers: int = 1
    train: TrainFn | None = None
    cpus_per_trial: float = 1.0
    gpus_per_trial: float = 0.0
    max_retries: int = 2
    namespace: str | None = None
    seed: int | None = None
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    trial_workers: int = 1
    gang_strategy: str = "PACK"

    def checked_options(self, executor: str) -> dict[str, Any]:
        """``options``, after checking that each is one ``executor`` takes (a ValueError names the rest)."""
        check_executor_options(executor, self.options, gang=self.trial_workers > 1)
        return dict(self.options)


#: the options each built-in executor takes, by name (here, not on the classes, so that a search's inputs are
#: checked before Ray is imported); a gang of Ray actors per trial (``trial_workers`` > 1) takes its own
EXECUTOR_OPTIONS: dict[str, tuple[str, ...]] = {
    "inprocess": (),
    "ray": ("prefetch", "start_timeout", "name_prefix"),
    "ray (gangs)": ("start_timeout", "name_prefix", "collective_timeout"),
    "simulated": ("benchmark", "noise", "round_trip", "prefetch", "objectives", "epochs"),
}


def check_executor_options(executor: str, options: Mapping[str, Any], *, gang: bool = False) -> None:
    """A ValueError naming each of ``options`` that built-in ``executor`` does not take, and those it does
    (an executor registered elsewhere checks its own)."""
    name = f"{executor} (gangs)" if gang and executor == "ray" else executor
    if name not in EXECUTOR_OPTIONS:
        return
    allowed = EXECUTOR_OPTIONS[name]
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"unknown options {unknown} for executor {name!r}{did_you_mean(unknown, allowed)}; "
                         f"allowed: {list(allowed)}")
    for key, value in options.items():  # (start_timeout=nan, a string, reached Ray as "nan" * 4: int()'s words)
        number = not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)
        if key in ("start_timeout", "collective_timeout") and not (number and value > 0):
            raise ValueError(f"executor option {key} must be a number of seconds > 0, got {value!r}")
        if key in ("noise", "round_trip") and not (number and value >= 0):
            raise ValueError(f"executor option {key} must be a finite number >= 0, got {value!r}")
        if key == "name_prefix" and not (isinstance(value, str) and value.strip()):
            raise ValueError(f"executor option name_prefix must be a non-empty string, got {value!r}")
        if key == "prefetch":
            prefetch_mode(value)


def prefetch_mode(value: object) -> bool | str:
    """A ``prefetch`` option as :class:`PrefetchRule` takes it: "auto", True (or 1) or False (or 0); a ValueError
    names anything else (checked with a search's inputs, before Ray starts)."""
    if isinstance(value, bool) or value == "auto":
        return value  # type: ignore[return-value]
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise ValueError(f"prefetch must be 'auto', True/1 or False/0, got {value!r}")


def build_executor(name: str, config: ExecutorConfig) -> Executor:
    """The executor registered as ``name``, built from ``config`` (a ValueError names unknown ones)."""
    cls: ExecutorClass = registry.executors.get(name)
    if config.trial_workers != 1 and name != "ray":
        raise ValueError(f"trial_workers={config.trial_workers!r}: data-parallel trials (gangs) need the ray "
                         f"executor, not {name!r}")
    return cls.from_config(config)


def finished(events: list[Event]) -> list[tuple[Trial, Result]]:
    """The (trial, final result) pairs among ``events``, in order, for code that only needs those."""
    return [(e.trial, e.result) for e in events if e.result is not None]


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


__all__ = ["GANG_STRATEGIES", "BoundedCheckpoints", "Checkpoints", "Event", "EventKind", "Executor", "ExecutorClass",
           "ExecutorConfig", "KeepRule", "PrefetchRule", "SimulatedClock", "TrainFn", "build_executor", "finished",
           "prefetch_mode"]
