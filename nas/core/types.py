"""The values that travel between strategies, the loop and executors.

Scores are "higher is better" everywhere inside the platform; a minimised metric is negated once,
where results enter (the trainer), never again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

Arch = Mapping[str, int | str | float]
"""A flat genotype: decision name -> chosen option. Plain, JSON-serialisable, order-free."""


def arch_key(arch: Arch) -> str:
    """A canonical JSON string for ``arch``: equal architectures give equal keys.

    >>> arch_key({"b": 1, "a": "relu"}) == arch_key({"a": "relu", "b": 1})
    True
    """
    return json.dumps(dict(arch), sort_keys=True, separators=(",", ":"))


def arch_hash(arch: Arch) -> str:
    """A short stable hash of ``arch`` (stable across processes and machines, unlike ``hash``).

    >>> arch_hash({"a": 1})
    '9f89c740ceb4'
    """
    return hashlib.sha1(arch_key(arch).encode()).hexdigest()[:12]


class TrialState(StrEnum):
    PENDING = "PENDING"
    QUEUED = "QUEUED"  # submitted to the executor, not begun by a worker yet (prefetched or in transit)
    RUNNING = "RUNNING"
    COMPLETE = "COMPLETE"
    FAILED = "FAILED"


class Decision(StrEnum):
    """What a strategy or scheduler answers to an intermediate result. PAUSE: end the run here and keep
    its checkpoint, since a promotion may continue it later (ASHA's promotion variant)."""

    CONTINUE = "CONTINUE"
    STOP = "STOP"
    PAUSE = "PAUSE"


class FailureKind(StrEnum):
    """Why a trial did not complete; the loop, results and the report show it."""

    ERROR = "ERROR"  # the trainer or the user's training function raised
    NAN = "NAN"  # a reported or final metric was NaN or infinite
    OOM = "OOM"  # the device ran out of memory
    INFEASIBLE = "INFEASIBLE"  # a constraint (params, FLOPs, latency) was broken; nothing was trained
    STOPPED = "STOPPED"  # a scheduler stopped it early (its last report stands as its result)
    PAUSED = "PAUSED"  # paused at a rung with its checkpoint (ASHA promotion); a promotion continues it
    WORKER_LOST = "WORKER_LOST"  # its worker died more times than the retries allowed
    OBJECTIVE_MISSING = "OBJECTIVE_MISSING"  # the trainer never reported an objective metric


@dataclasses.dataclass(frozen=True, slots=True)
class Trial:
    """One unit of work: train ``arch`` with ``hparams`` for ``epochs`` epochs.

    ``epochs`` and ``hparams`` left empty mean the run's defaults. ``checkpoint_from`` names a finished
    trial whose saved model and optimizer state this one starts from (PBT's exploit, expressed as a
    value); ``save_checkpoint`` asks the executor to keep this trial's final state for later trials.
    ``member`` groups the segments of one PBT population member. ``inherit_from`` names a finished trial
    (usually the parent) whose trained weights this one starts from wherever a tensor's name and shape are
    unchanged (weight inheritance, Real et al. 2017); the rest is freshly initialised.
    """

    trial_id: int
    arch: Arch
    hparams: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    epochs: int | None = None
    parent: int | None = None
    checkpoint_from: int | None = None
    save_checkpoint: bool = False
    member: int | None = None
    strategy: str = ""
    inherit_from: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["arch"] = dict(self.arch)
        d["hparams"] = dict(self.hparams)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Trial:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclasses.dataclass(slots=True)
class Result:
    """What became of a trial. ``score`` is higher-is-better and finite for COMPLETE trials.

    ``scores``: every objective's higher-is-better value, in the run's objective order (``score`` is the
    first); ``reason``: why it ended where it did: a :class:`FailureKind` value for FAILED trials; for
    COMPLETE ones None (it trained all its epochs), ``STOPPED`` (a scheduler stopped it; its last report
    stands) or ``PAUSED`` (paused at a rung with its checkpoint; a promotion may continue it).
    """

    trial_id: int
    state: TrialState
    score: float | None = None
    metrics: dict[str, Any] = dataclasses.field(default_factory=dict)
    history: list[dict[str, float]] = dataclasses.field(default_factory=list)  # one entry per epoch
    epoch: int = 0  # epochs the model has seen in all, resumed ones included
    error: str | None = None
    start_time: float | None = None
    end_time: float | None = None
    worker: str | None = None
    node: str | None = None
    scores: list[float] | None = None
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.state is TrialState.COMPLETE

    @classmethod
    def failed(cls, trial_id: int, error: str, reason: FailureKind | str = "ERROR", **kw: Any) -> Result:
        return cls(trial_id=trial_id, state=TrialState.FAILED, error=error, reason=str(reason), **kw)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["state"] = self.state.value
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Result:
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw["state"] = TrialState(kw["state"])
        return cls(**kw)


def finite_score(value: Any) -> float | None:
    """``value`` as a float when it is a finite number, else None (NaN and inf are failures)."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None
