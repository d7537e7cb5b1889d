"""The in-process executor, and what the built-in executors share (the Protocol they implement, its
events and the registry are in :mod:`nas.engine.protocol`).

- :class:`InProcessExecutor`: trials run one after another in this process, in submission order
  (deterministic; for tests and debugging).
- :class:`nas.engine.ray_pool.RayExecutor`: a fixed pool of Ray trainer actors.
- ``nas.engine.simulated.SimulatedExecutor``: answers from a tabular benchmark on a simulated clock.

Checkpoints (PBT's exploit, best-weight export) are kept by the executor under the trial id that
made them; a trial with ``checkpoint_from`` starts from that state.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Collection
from typing import TYPE_CHECKING, Any, cast

from nas.core.registry import register_executor
from nas.core.types import Decision, Result, Trial
from nas.engine.channel import TrialChannel
from nas.engine.protocol import Event, Executor, ExecutorConfig, KeepRule

if TYPE_CHECKING:
    from nas.core.space import SearchSpace
    from nas.train.data import Dataset
    from nas.train.trainer import TrainerFactory, TrainSettings

__all__ = ["BaseExecutor", "CheckpointStore", "Event", "Executor", "InProcessExecutor"]


class BaseExecutor:
    """Defaults shared by the built-in executors (they implement :class:`nas.engine.protocol.Executor`)."""

    #: how many finished trials' checkpoints are kept for later ``checkpoint_from`` (oldest dropped)
    checkpoint_keep: int = 256
    #: the best score so far (the loop sets it): a trial's checkpoint is made when it beats it (a possible
    #: new best, whose weights are exported) or a strategy will use it (see KeepRule)
    keep_above: float | None = None

    def keep_rule(self, trial: Trial) -> KeepRule:
        return KeepRule(save=trial.save_checkpoint, above=self.keep_above)

    def checkpoint(self, trial_id: int) -> bytes | None:
        """The saved state (model, optimizer, epoch) of a finished trial, if still kept."""
        return None

    def restore_checkpoint(self, trial_id: int, data: bytes) -> None:
        """Keep ``data`` as the checkpoint of finished trial ``trial_id`` (read back from the run
        directory on resume), so later trials can start from it."""

    def now(self) -> float | None:
        """The executor's clock when it is simulated; None for wall-clock executors."""
        return None

    def decide(self, trial_id: int, decision: Decision) -> None:
        """The loop's answer to a report of ``trial_id`` (STOP or PAUSE; CONTINUE is never sent)."""

    def decision_epochs(self, epochs: Collection[int]) -> None:
        """Epochs at which workers wait for the loop's answer to their report (a scheduler's rungs)."""

    def shutdown(self) -> None:
        pass

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


class CheckpointStore:
    """A bounded map trial id -> checkpoint (bytes or a Ray ObjectRef), oldest evicted first."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._items: collections.OrderedDict[int, object] = collections.OrderedDict()

    def put(self, trial_id: int, ckpt: object) -> None:
        if ckpt is None:
            return
        self._items[trial_id] = ckpt
        while len(self._items) > self.keep:
            self._items.popitem(last=False)

    def get(self, trial_id: int | None) -> object | None:
        if trial_id is None:
            return None
        if trial_id not in self._items:
            raise KeyError(f"no checkpoint is kept for trial {trial_id}")
        return self._items[trial_id]

    def __contains__(self, trial_id: object) -> bool:
        return trial_id in self._items


@register_executor("inprocess")
class InProcessExecutor(BaseExecutor):
    """Runs each trial in this process, in submission order. ``slots`` trials may be submitted at once (as a
    pool of that many workers would take them), which lets asynchronous strategies be tested
    deterministically. A submitted trial is QUEUED until a ``poll`` begins it.

    A trial that reports (the TorchTrainer, a training function) trains on a thread of its own in lockstep
    with the loop: each ``poll`` returns the next thing that happened (``started`` with its first report,
    a ``report``, or ``finished``) and the training waits there until the next ``poll`` or ``decide``, so
    the loop's answer to every report lands before another epoch is trained, always at the same point."""

    def __init__(
        self,
        space: SearchSpace,
        data: Dataset | None,
        settings: TrainSettings | None = None,
        *,
        trainer: TrainerFactory | None = None,
        slots: int = 1,
    ) -> None:
        from nas.train.trainer import TorchTrainer, TrainSettings, trainer_reports

        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise ValueError(f"slots must be an integer >= 1, got {slots!r}")
        self.space = space
        self._slots = slots
        self._trainer = (trainer or TorchTrainer)(data, settings or TrainSettings())  # type: ignore[arg-type]
        self._reports = trainer_reports(self._trainer)  # False: run at once, no thread
        self._queue: collections.deque[Trial] = collections.deque()
        self._current: tuple[Trial, TrialChannel] | None = None
        self._stopped: set[int] = set()
        self._ckpts = CheckpointStore(self.checkpoint_keep)

    @classmethod
    def from_config(cls, cfg: ExecutorConfig) -> InProcessExecutor:
        cfg.checked_options("inprocess")
        return cls(cfg.space, cfg.data, cfg.settings, trainer=cfg.trainer, slots=cfg.workers)

    @property
    def slots(self) -> int:
        return self._slots

    def free_slots(self) -> int:
        return self._slots - self.in_flight()

    def in_flight(self) -> int:
        return len(self._queue) + (self._current is not None)

    def submit(self, trial: Trial) -> None:
        if self.free_slots() <= 0:
            raise RuntimeError("no free slot: submit only when free_slots() > 0")
        self._queue.append(trial)

    def stop(self, trial_id: int) -> None:
        self._stopped.add(trial_id)
        if self._current is not None and self._current[0].trial_id == trial_id:
            self._current[1].decide(Decision.STOP)

    def decide(self, trial_id: int, decision: Decision) -> None:
        if self._current is not None and self._current[0].trial_id == trial_id:
            self._current[1].decide(decision)

    def poll(self, timeout: float | None = None) -> list[Event]:
        """The next step of the trial in progress, or the start of the next queued one."""
        from nas.train.trainer import run_trainer

        events: list[Event] = []
        if self._current is None:
            if not self._queue:
                return []
            trial = self._queue.popleft()
            if trial.trial_id in self._stopped:
                return [Event.finished(trial, Result.failed(trial.trial_id, "stopped"))]
            try:
                source = cast("bytes | None", self._ckpts.get(trial.checkpoint_from))
                inherit = cast("bytes | None", self._ckpts.get(trial.inherit_from))
            except KeyError as e:  # evicted, or lost with a driver crash: the trial cannot start from it
                return [Event.finished(trial, Result.failed(trial.trial_id, str(e.args[0])))]
            events.append(Event.started(trial, time=time.time(), worker=getattr(self._trainer, "worker", None)))
            keep = self.keep_rule(trial)
            if not self._reports:
                result, ckpt = run_trainer(self._trainer, trial, self.space, source, keep=keep)
                return [*events, self._finish(trial, result, ckpt)]
            channel = TrialChannel(lockstep=True)
            channel.start(lambda: run_trainer(self._trainer, trial, self.space, source, report=channel.report,
                                              inherit=inherit, keep=keep))  # type: ignore[arg-type]
            self._current = (trial, channel)
        else:
            self._current[1].go_on()
        trial, channel = self._current
        item = channel.next()
        if item[0] == "report":
            _, epoch, metrics, score, when = item
            return [*events, Event.report(trial, epoch, metrics, score=score, time=when,
                                          worker=getattr(self._trainer, "worker", None))]
        self._current = None
        if item[0] == "error":
            raise item[1]
        result, ckpt = item[1]
        return [*events, self._finish(trial, result, ckpt)]

    def _finish(self, trial: Trial, result: Result, ckpt: bytes | None) -> Event:
        self._stopped.discard(trial.trial_id)
        self._ckpts.put(trial.trial_id, ckpt)
        return Event.finished(trial, result)

    def checkpoint(self, trial_id: int) -> bytes | None:
        return self._ckpts.get(trial_id) if trial_id in self._ckpts else None  # type: ignore[return-value]

    def restore_checkpoint(self, trial_id: int, data: bytes) -> None:
        self._ckpts.put(trial_id, data)
