"""Executors run trials; the loop talks to all of them through this one interface.

- :class:`InProcessExecutor`: trials run one after another in this process, in submission order
  (deterministic; for tests and debugging).
- :class:`nas.ray_executor.RayExecutor`: a fixed pool of Ray trainer actors.
- ``nas.simulated.SimulatedExecutor``: answers from a tabular benchmark on a simulated clock.

Checkpoints (PBT's exploit, best-weight export) are kept by the executor under the trial id that
made them; a trial with ``checkpoint_from`` starts from that state.
"""

from __future__ import annotations

import collections
from collections.abc import Callable

from nas.data import Dataset
from nas.space import SearchSpace
from nas.trainer import TorchTrainer, Trainer, TrainerFactory, TrainSettings
from nas.types import Result, Trial


class Executor:
    """The interface. ``poll`` returns finished trials (possibly none before ``timeout``)."""

    #: how many finished trials' checkpoints are kept for later ``checkpoint_from`` (oldest dropped)
    checkpoint_keep: int = 256

    def free_slots(self) -> int:
        raise NotImplementedError

    @property
    def slots(self) -> int:
        raise NotImplementedError

    def in_flight(self) -> int:
        raise NotImplementedError

    def submit(self, trial: Trial) -> None:
        raise NotImplementedError

    def poll(self, timeout: float | None = None) -> list[tuple[Trial, Result]]:
        raise NotImplementedError

    def stop(self, trial_id: int) -> None:
        """Cancel a submitted trial; it comes back from ``poll`` as FAILED ("stopped")."""
        raise NotImplementedError

    def checkpoint(self, trial_id: int) -> bytes | None:
        """The saved state (model, optimizer, epoch) of a finished trial, if still kept."""
        raise NotImplementedError

    def restore_checkpoint(self, trial_id: int, data: bytes) -> None:
        """Keep ``data`` as the checkpoint of finished trial ``trial_id`` (read back from the run
        directory on resume), so later trials can start from it."""
        raise NotImplementedError

    def now(self) -> float | None:
        """The executor's clock when it is simulated; None for wall-clock executors."""
        return None

    def shutdown(self) -> None:
        pass

    def __enter__(self) -> Executor:
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


class InProcessExecutor(Executor):
    """Runs each trial in this process when polled, in submission order. ``slots`` trials may be
    submitted at once (as a pool of that many workers would take them), which lets asynchronous
    strategies be tested deterministically."""

    def __init__(
        self,
        space: SearchSpace,
        data: Dataset | None,
        settings: TrainSettings | None = None,
        *,
        trainer: TrainerFactory | Callable[..., Trainer] = TorchTrainer,
        slots: int = 1,
    ) -> None:
        self.space = space
        self._slots = slots
        self._trainer = trainer(data, settings or TrainSettings())  # type: ignore[arg-type]
        self._queue: collections.deque[Trial] = collections.deque()
        self._stopped: set[int] = set()
        self._ckpts = CheckpointStore(self.checkpoint_keep)

    @property
    def slots(self) -> int:
        return self._slots

    def free_slots(self) -> int:
        return self._slots - len(self._queue)

    def in_flight(self) -> int:
        return len(self._queue)

    def submit(self, trial: Trial) -> None:
        if self.free_slots() <= 0:
            raise RuntimeError("no free slot: submit only when free_slots() > 0")
        self._queue.append(trial)

    def stop(self, trial_id: int) -> None:
        self._stopped.add(trial_id)

    def poll(self, timeout: float | None = None) -> list[tuple[Trial, Result]]:
        if not self._queue:
            return []
        trial = self._queue.popleft()
        if trial.trial_id in self._stopped:
            return [(trial, Result.failed(trial.trial_id, "stopped"))]
        try:
            source = self._ckpts.get(trial.checkpoint_from)
        except KeyError as e:
            return [(trial, Result.failed(trial.trial_id, str(e)))]
        result, ckpt = self._trainer.run(trial, self.space, source)  # type: ignore[arg-type]
        self._ckpts.put(trial.trial_id, ckpt)
        return [(trial, result)]

    def checkpoint(self, trial_id: int) -> bytes | None:
        return self._ckpts.get(trial_id) if trial_id in self._ckpts else None  # type: ignore[return-value]

    def restore_checkpoint(self, trial_id: int, data: bytes) -> None:
        self._ckpts.put(trial_id, data)
