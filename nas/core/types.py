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


def within_int64(n: int) -> bool:
    """Whether integer ``n`` fits the 64 bits the run's readers give every integer (:mod:`nas.run.schema`).

    >>> within_int64(2**63 - 1), within_int64(2**63), within_int64(-(2**63))
    (True, False, True)
    """
    return -(2**63) <= n < 2**63


def check_seed(seed: object, name: str = "seed") -> int:
    """``seed`` where it is one numpy's and torch's generators take, an integer from 0 below 2**63; else a one-line
    ValueError naming ``name`` (theirs say "expected non-negative integer" or "Overflow when unpacking long long").

    >>> check_seed(7)
    7
    >>> check_seed(-1)
    Traceback (most recent call last):
    ...
    ValueError: seed must be an integer from 0 to 2**63 - 1, got -1
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise ValueError(f"{name} must be an integer from 0 to 2**63 - 1, got {seed!r}")
    return seed


def arch_key(arch: Arch) -> str:
    """A canonical JSON string for ``arch``: equal architectures give equal keys.

    >>> arch_key({"b": 1, "a": "relu"}) == arch_key({"a": "relu", "b": 1})
    True
    """
    return json.dumps(python_numbers(dict(arch)), sort_keys=True, separators=(",", ":"))  # (np.int64: TypeError)


def arch_hash(arch: Arch) -> str:
    """A short stable hash of ``arch`` (stable across processes and machines, unlike ``hash``).

    >>> arch_hash({"a": 1})
    '9f89c740ceb4'
    """
    return hashlib.sha1(arch_key(arch).encode()).hexdigest()[:12]


class InvalidArchitecture(ValueError):
    """An architecture that does not belong to its space."""


#: the trial hyperparameters that are whole numbers (nas.train.hparams checks them; a strategy that searches a range
#: of one draws and explores it in whole numbers)
INTEGER_HPARAMS = ("batch_size", "step_epochs", "crop_padding", "cutout")


class InvalidSpace(ValueError):
    """A space whose declaration is broken (empty options, duplicate names, a build that fails)."""


class SupernetChanged(ValueError):
    """The weights file of the supernet a search evaluates with is no longer the one the search read (it was
    trained on or replaced): no later trial can be scored as the earlier ones were, so the search stops."""


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


class Outcome(StrEnum):
    """How a trial's run ended. COMPLETE, STOPPED and PAUSED carry a score (``Result.ok``); CANCELLED and
    FAILED do not."""

    COMPLETE = "COMPLETE"  # it trained all its epochs
    STOPPED = "STOPPED"  # a scheduler stopped it early: its last report stands as its result
    PAUSED = "PAUSED"  # paused at a rung with its checkpoint (ASHA promotion): a promotion may continue it
    CANCELLED = "CANCELLED"  # the driver cancelled it (a stop request): not a result; a resume runs it again
    FAILED = "FAILED"  # it could not be trained: ``Result.failure`` says why


SCORED = frozenset({Outcome.COMPLETE, Outcome.STOPPED, Outcome.PAUSED})


class FailureKind(StrEnum):
    """Why a trial FAILED; the loop, results and the report show it."""

    ERROR = "ERROR"  # the trainer or the user's training function raised
    NAN = "NAN"  # a reported or final metric was NaN or infinite
    OOM = "OOM"  # the device ran out of memory
    INFEASIBLE = "INFEASIBLE"  # a constraint (params, FLOPs, latency) was broken; nothing was trained
    INVALID_SPACE = "INVALID_SPACE"  # the space's build raised or returned no module for this architecture
    WORKER_LOST = "WORKER_LOST"  # its worker died more times than the retries allowed
    OBJECTIVE_MISSING = "OBJECTIVE_MISSING"  # the trainer never reported an objective metric
    CHECKPOINT_MISSING = "CHECKPOINT_MISSING"  # the checkpoint it starts from is no longer kept
    COLLECTIVE = "COLLECTIVE"  # a collective of its data-parallel gang failed or timed out (a rank stopped answering)
    SUPERNET_CHANGED = "SUPERNET_CHANGED"  # the supernet's weights file changed under the search: the search stops
    TIMEOUT = "TIMEOUT"  # it ran past the run's trial_timeout (its worker was stopped, or in-process left behind)


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
    """What became of a trial. ``score`` is higher-is-better and finite for scored outcomes (``ok``).

    ``outcome``: how it ended (:class:`Outcome`); ``failure``: why, exactly when the outcome is FAILED;
    ``scores``: every objective's higher-is-better value, in the run's objective order (``score`` is the
    first); ``epoch``: the epochs the model has seen in all (a promoted trial's resumed ones included).
    """

    trial_id: int
    outcome: Outcome
    score: float | None = None
    metrics: dict[str, Any] = dataclasses.field(default_factory=dict)
    history: list[dict[str, float]] = dataclasses.field(default_factory=list)  # one entry per epoch
    epoch: int = 0
    error: str | None = None
    start_time: float | None = None
    end_time: float | None = None
    worker: str | None = None
    node: str | None = None
    scores: list[float] | None = None
    failure: FailureKind | None = None

    def __post_init__(self) -> None:
        if (self.outcome is Outcome.FAILED) != (self.failure is not None):
            raise ValueError(f"trial {self.trial_id}: a FAILED result needs a failure kind, and only a FAILED one "
                             f"has one (got {self.outcome.value}, {self.failure})")

    @property
    def ok(self) -> bool:
        """Whether it carries a score (COMPLETE, STOPPED or PAUSED)."""
        return self.outcome in SCORED

    @property
    def state(self) -> TrialState:
        """The trial state this result leaves it in: COMPLETE when scored, else FAILED."""
        return TrialState.COMPLETE if self.ok else TrialState.FAILED

    @classmethod
    def failed(cls, trial_id: int, error: str, failure: FailureKind = FailureKind.ERROR, **kw: Any) -> Result:
        return cls(trial_id=trial_id, outcome=Outcome.FAILED, error=error, failure=failure, **kw)

    @classmethod
    def cancelled(cls, trial_id: int, **kw: Any) -> Result:
        return cls(trial_id=trial_id, outcome=Outcome.CANCELLED, error="cancelled", **kw)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["outcome"] = self.outcome.value
        d["failure"] = None if self.failure is None else self.failure.value
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Result:
        """From :meth:`to_dict`'s form, or from a journal written before outcomes were typed (``state``
        COMPLETE/FAILED and a ``reason`` string: see :func:`legacy_outcome`)."""
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        if "outcome" not in d:
            kw["outcome"], kw["failure"] = legacy_outcome(d.get("state"), d.get("reason"), d.get("error"))
        else:
            kw["outcome"] = Outcome(kw["outcome"])
            kw["failure"] = None if kw.get("failure") is None else FailureKind(kw["failure"])
        return cls(**kw)


@dataclasses.dataclass(frozen=True, slots=True)
class Report:
    """An intermediate result: what trial ``trial_id`` reported after ``epoch`` as it trained. ``score``: the run's
    first objective, higher is better (None where the report lacks it); ``time``: when, on the executor's clock;
    ``worker``: where."""

    trial_id: int
    epoch: int
    metrics: Mapping[str, Any]
    score: float | None = None
    time: float | None = None
    worker: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"trial_id": self.trial_id, "epoch": self.epoch, "metrics": dict(self.metrics), "score": self.score,
                "time": self.time, "worker": self.worker}


def legacy_outcome(state: Any, reason: Any, error: Any) -> tuple[Outcome, FailureKind | None]:
    """The typed outcome of a result journaled by format 2 (``state`` COMPLETE/FAILED; ``reason`` None, STOPPED,
    PAUSED or a failure kind; a broken build's error began "InvalidSpace:"; a cancelled trial was FAILED with error
    "stopped", and stays so).

    >>> legacy_outcome("COMPLETE", "PAUSED", None), legacy_outcome("FAILED", "ERROR", "InvalidSpace: no")
    ((<Outcome.PAUSED: 'PAUSED'>, None), (<Outcome.FAILED: 'FAILED'>, <FailureKind.INVALID_SPACE: 'INVALID_SPACE'>))
    """
    if state == "COMPLETE":
        return (Outcome(reason) if reason in ("STOPPED", "PAUSED") else Outcome.COMPLETE), None
    if state != "FAILED":
        raise ValueError(f"state {state!r} is neither COMPLETE nor FAILED")
    if isinstance(error, str) and error.startswith("InvalidSpace:"):
        return Outcome.FAILED, FailureKind.INVALID_SPACE
    return Outcome.FAILED, FailureKind(reason) if reason in FailureKind.__members__ else FailureKind.ERROR


def finite_score(value: Any) -> float | None:
    """``value`` as a float when it is a finite number, else None (NaN and inf are failures)."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def python_numbers(value: Any) -> Any:
    """``value`` with every number numpy or torch holds as Python's number: numpy scalars (``np.int64(3)``, as
    ``np.arange`` and arrays give them) and one-number arrays or tensors (``(pred == y).float().mean()``), in lists,
    tuples and mappings too: what a config holds, run.json writes and the journal records. (A config refused them as
    "must be an integer, got np.int64(3)"; a metric as "must be a number, got tensor(0.5000)".)

    >>> import numpy as np
    >>> python_numbers({"population": np.int64(8), "p": [np.float32(0.5)], "on": np.bool_(True), "n": np.array([2])})
    {'population': 8, 'p': [0.5], 'on': True, 'n': 2}
    """
    if _one_real_number(value):
        return value.item()
    if isinstance(value, Mapping):
        return {k: python_numbers(v) for k, v in value.items()}
    if type(value) in (list, tuple):  # (not a subclass: a namedtuple is not built from one iterable)
        return type(value)(python_numbers(v) for v in value)
    return value


def _one_real_number(value: Any) -> bool:
    """Whether ``value`` is a numpy scalar or array, or a torch tensor, of one real number (bool, int or float)."""
    module = type(value).__module__.partition(".")[0]
    if module == "torch" and callable(getattr(value, "numel", None)):
        return bool(value.numel() == 1 and not value.dtype.is_complex)
    if module == "numpy" and hasattr(value, "dtype"):
        return int(value.size) == 1 and value.dtype.kind in "biuf"
    return False
