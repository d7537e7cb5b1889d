"""Population-based training over architectures and hyperparameters.

Jaderberg et al. 2017, "Population Based Training of Neural Networks", section 3 (asynchronous, with
truncation selection for exploit and perturb/resample for explore).

A population of ``population`` members, each an (architecture, hparams) pair, trains in segments of
``interval`` epochs. Each segment is one :class:`~nas.Trial` that starts from the member's own last
checkpoint (``checkpoint_from``; the executor passes it by reference, through Ray's object store in the
Ray executor), so a member goes on from the epoch it was at. When a segment finishes:

- if the member ranks in the bottom ``quantile`` of the population (by its latest score), it is retired
  (exploit): it takes the checkpoint, architecture and hparams of a member drawn uniformly from the top
  ``quantile``, and perturbs the hparams (explore): each is multiplied by 0.8 or 1.2 (a choice moves to
  a neighbouring option), or with probability ``resample_probability`` drawn afresh from its range.
  Its architecture is gone from the population unless another member still has it;
- otherwise it continues from its own checkpoint with its own hparams.

With ``arch_mutation`` > 0, explore also changes the architecture with that probability: the retired member
takes a one-decision mutation of the donor's architecture (``space.mutate``), and since a checkpoint of
another architecture cannot be resumed, its next segment inherits the donor's weights instead
(``inherit_from``: every tensor whose name and shape the mutation left unchanged, the rule of
:mod:`nas.train.inherit`; Real et al. 2017) and trains from epoch 0; later segments resume their own.

Why segments are trials and decisions are taken in ``tell``, not ``report``: the executors run whole
trials and keep a checkpoint per finished trial, so a segment boundary is a trial boundary. That gives
every segment its own checkpoint to copy, lets any free worker run a member's next segment, and keeps
exploit a value (``Trial(checkpoint_from=...)``) instead of a side effect on a running trainer.
:meth:`report` keeps the base behaviour (CONTINUE). The budget counts segments.

Failures: a FAILED segment retires its member as if it ranked last (it copies a top member, or starts
afresh from a random architecture while nobody has a score). A segment whose checkpoint is missing
(``no checkpoint is kept``) makes its member start its segment again from scratch; if the member's fresh
segment has no checkpoint either, the training function keeps none (e.g. :func:`nas.train.simple.scored`) and
PBT stops asking for checkpoints (``self.checkpoints`` becomes False): segments then train from scratch.

>>> from nas.search_spaces.toy import ToySpace, toy_score
>>> from nas.core.types import Result, TrialState
>>> pbt = PopulationBasedTraining(ToySpace(), population=4, interval=2, seed=0)
>>> first = [pbt.ask() for _ in range(4)]
>>> pbt.ask() is None   # every member is training: nothing to propose until a segment ends
True
>>> for t, s in zip(first, [1.0, 2.0, 3.0, 4.0]):
...     pbt.tell(t, Result(t.trial_id, TrialState.COMPLETE, score=s, epoch=2))
>>> nxt = pbt.ask()
>>> nxt.member, nxt.checkpoint_from, nxt.epochs   # member 0 continues from its own segment
(0, 0, 2)
"""

from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nas.core.registry import register_strategy
from nas.core.space import SearchSpace
from nas.core.strategy import Strategy, check_fraction, check_positive_int
from nas.core.types import INTEGER_HPARAMS, Arch, Result, Trial

DEFAULT_HPARAMS: dict[str, Any] = {"lr": {"low": 1e-4, "high": 1e-1, "log": True}}
MISSING_CHECKPOINT = "no checkpoint is kept"  # the executors' error for an absent checkpoint_from
EXPLOITS_KEPT = 100  # the latest retirements kept for inspection (the journal has them all)


@dataclasses.dataclass
class Member:
    member_id: int
    arch: dict[str, Any]
    hparams: dict[str, Any]
    source: int | None = None  # the segment (trial id) whose checkpoint the next segment starts from
    score: float | None = None  # the latest segment's score; None until one finishes (or after exploit)
    epoch: int = 0
    segments: int = 0
    inherit: bool = False  # the next segment inherits ``source``'s weights (its architecture was mutated)


def parse_hparams(spec: Mapping[str, Any]) -> dict[str, Any]:
    """``{"name": {"low": a, "high": b, "log": True}}`` (a range) or ``{"name": [choices]}``, checked."""
    if not isinstance(spec, Mapping) or not spec:
        raise ValueError(f"hparams must be a non-empty mapping of name -> range or choices, got {spec!r}")
    out: dict[str, Any] = {}
    for name, s in spec.items():
        if isinstance(s, Mapping):
            unknown = set(s) - {"low", "high", "log"}
            if unknown or "low" not in s or "high" not in s:
                raise ValueError(f"hparam {name!r}: a range is {{'low': ..., 'high': ..., 'log': bool}}, got {s!r}")
            low, high, log = float(s["low"]), float(s["high"]), bool(s.get("log", True))
            if not (math.isfinite(low) and math.isfinite(high) and low < high and (low > 0 or not log)):
                raise ValueError(f"hparam {name!r}: low < high (and low > 0 on a log scale) must hold, "
                                 f"got low={low}, high={high}, log={log}")
            out[name] = {"low": low, "high": high, "log": log, "integer": name in INTEGER_HPARAMS}
        elif isinstance(s, (list, tuple)) and s:
            out[name] = list(s)
        else:
            raise ValueError(f"hparam {name!r}: give a range {{'low': ..., 'high': ...}} or a non-empty "
                             f"list of choices, got {s!r}")
    return out


def _whole(s: Mapping[str, Any], value: float) -> float | int:
    """A value drawn from a range: a whole number within it for an integer hyperparameter (cutout 1.8 failed every
    trial that drew it; batch size 16.75 was journaled while 16 trained), else the float."""
    if not s.get("integer"):
        return float(value)
    return int(min(max(round(value), math.ceil(s["low"])), math.floor(s["high"])))


@register_strategy("pbt")
class PopulationBasedTraining(Strategy):
    """Options: ``population`` (members, default 8), ``quantile`` (bottom/top fraction, default 0.25,
    at most 0.5; population x quantile >= 1), ``interval`` (epochs per segment; default None: the run's epochs),
    ``hparams`` (ranges and choices to explore; default lr in [1e-4, 1e-1], log scale), ``resample_probability``
    (default 0.25), ``arch_mutation`` (probability that explore also mutates the architecture, whose
    segment then inherits the donor's weights; default 0.0)."""

    multi_objective = "refuse"
    stops_own_trials = True
    refusal = ("it trains its members in segments and decides at each one itself (exploit/explore), ranking "
               "members on one score")

    def __init__(
        self,
        space: SearchSpace,
        *,
        seed: int | None = None,
        population: int = 8,
        quantile: float = 0.25,
        interval: int | None = None,
        hparams: Mapping[str, Any] | None = None,
        resample_probability: float = 0.25,
        arch_mutation: float = 0.0,
    ) -> None:
        super().__init__(space, seed=seed)
        self.capacity = check_positive_int("population", population)
        self.quantile = check_fraction("quantile", quantile, high=0.5)
        if int(self.capacity * self.quantile) == 0:  # (accepted, it never exploited: a silent random search)
            least = math.ceil(1000 / self.capacity) / 1000  # (rounded up: 3 x 0.333 holds none)
            fix = (f"with {self.capacity} members quantile >= {least:g}" if self.capacity >= 2 else
                   "with 1 member no quantile <= 0.5 does; use population >= 2")
            raise ValueError(f"population x quantile must be >= 1 (the bottom quantile must hold a member, or none "
                             f"ever exploits), got population={self.capacity}, quantile={self.quantile} "
                             f"({self.capacity * self.quantile:.3g}); {fix}")
        self.interval = None if interval is None else check_positive_int("interval", interval)
        self.hparam_space = parse_hparams(DEFAULT_HPARAMS if hparams is None else hparams)
        self.resample_probability = check_fraction("resample_probability", resample_probability)
        self.arch_mutation = check_fraction("arch_mutation", arch_mutation)
        self.members: list[Member] = []
        self.ready: collections.deque[int] = collections.deque()  # members waiting for their next segment
        self.running: set[int] = set()
        self.checkpoints = True
        # the latest retirements, for inspection (bounded: the state is saved after every round)
        self.exploits: collections.deque[dict[str, Any]] = collections.deque(maxlen=EXPLOITS_KEPT)
        self._restarted: set[int] = set()  # fresh segments started because a checkpoint was missing
        self._fresh_next: set[int] = set()  # members whose next segment restarts after a missing checkpoint
        self._scores = np.full(0, np.nan)

    # -- hparams -------------------------------------------------------------------------------
    def _sample(self, name: str) -> Any:
        s = self.hparam_space[name]
        if isinstance(s, list):
            return s[int(self.rng.integers(len(s)))]
        if s["log"]:
            return _whole(s, math.exp(self.rng.uniform(math.log(s["low"]), math.log(s["high"]))))
        return _whole(s, self.rng.uniform(s["low"], s["high"]))

    def _explore(self, hparams: Mapping[str, Any]) -> dict[str, Any]:
        out = {}
        for name, s in self.hparam_space.items():
            value = hparams.get(name)
            if self.rng.random() < self.resample_probability or value is None:
                out[name] = self._sample(name)
            elif isinstance(s, list):
                i = s.index(value) if value in s else int(self.rng.integers(len(s)))
                out[name] = s[min(max(i + (1 if self.rng.random() < 0.5 else -1), 0), len(s) - 1)]
            else:
                factor = 1.2 if self.rng.random() < 0.5 else 0.8
                moved = _whole(s, min(max(value * factor, s["low"]), s["high"]))
                if s.get("integer") and moved == value:  # (x 0.8 and x 1.2 round back to 0, 1 and 2: a step of one)
                    moved = _whole(s, value + (1 if factor > 1 else -1))
                out[name] = moved
        return out

    # -- ask / tell ----------------------------------------------------------------------------
    def ask(self) -> Trial | None:
        if len(self.members) < self.capacity:
            m = Member(len(self.members), self.space.sample(self.rng),
                       {n: self._sample(n) for n in self.hparam_space})
            self.members.append(m)
            self._scores = np.append(self._scores, np.nan)
        elif self.ready:
            m = self.members[self.ready.popleft()]
        else:
            return None  # every member is training
        self.running.add(m.member_id)
        source = m.source if self.checkpoints else None
        trial = self.trial(m.arch, hparams=dict(m.hparams), epochs=self.interval, parent=m.source,
                           checkpoint_from=None if m.inherit else source, inherit_from=source if m.inherit else None,
                           save_checkpoint=True, member=m.member_id)
        if m.member_id in self._fresh_next:
            self._fresh_next.discard(m.member_id)
            self._restarted.add(trial.trial_id)
        return trial

    def tell(self, trial: Trial, result: Result) -> None:
        if trial.member is None or not 0 <= trial.member < len(self.members):
            return  # not one of ours
        m = self.members[trial.member]
        self.running.discard(m.member_id)
        if result.ok and result.score is not None:
            m.source, m.score, m.epoch = trial.trial_id, float(result.score), int(result.epoch)
            m.inherit = False  # its own checkpoint now: resumed from here on
            m.segments += 1
            self._scores[m.member_id] = m.score
            if self._in_bottom(m):
                self._exploit(m, trial.trial_id)
        elif MISSING_CHECKPOINT in (result.error or "") and (trial.checkpoint_from, trial.inherit_from) != (None, None):
            if (trial.checkpoint_from if trial.inherit_from is None else trial.inherit_from) in self._restarted:
                self.checkpoints = False  # a fresh segment left no checkpoint: the trainer keeps none
            m.source, m.epoch, m.inherit = None, 0, False
            self._fresh_next.add(m.member_id)
        else:
            m.score = None
            self._scores[m.member_id] = np.nan
            if not self._exploit(m, trial.trial_id):  # nobody to copy yet: start afresh
                m.arch, m.source, m.epoch, m.inherit = self.space.sample(self.rng), None, 0, False
                m.hparams = {n: self._sample(n) for n in self.hparam_space}
        self.ready.append(m.member_id)

    def warm_start(self, trial: Trial, result: Result) -> None:
        """Refused: PBT's members train on from their own segments' checkpoints; a finished trial of another
        run is none of them (warm-start evolution instead, which can inherit its weights)."""
        raise ValueError("strategy 'pbt' cannot be warm-started: its members train on from their own segments, "
                         "and a finished trial of another run is none of them; warm-start evolution instead")

    def population_size(self) -> int:
        return len(self.members)

    def checkpoints_needed(self) -> int:
        return self.capacity  # (each member's source)

    def expendable(self, kept: Sequence[int]) -> int | None:
        """The oldest kept segment no member starts its next segment from (a member's earlier segments, a retired
        member's): with a population past the executor's bound the oldest went, and 242 of 1,500 segments of a
        population of 300 failed as CHECKPOINT_MISSING (their members restarted from scratch)."""
        sources = {m.source for m in self.members}
        return next((t for t in kept if t not in sources), None)

    def _cut(self) -> int:
        """How many members the bottom (and top) quantile holds among those with a score."""
        return int(np.count_nonzero(~np.isnan(self._scores)) * self.quantile)

    def _in_bottom(self, m: Member) -> bool:
        k = self._cut()
        return k > 0 and int(np.count_nonzero(self._scores < m.score)) < k

    def _exploit(self, m: Member, trial_id: int) -> bool:
        """Retire ``m``: copy a top-quantile member's checkpoint, architecture and perturbed hparams."""
        k = self._cut()
        if k == 0:
            return False
        scored = self._scores[~np.isnan(self._scores)]
        threshold = np.partition(scored, len(scored) - k)[len(scored) - k]
        top = [int(i) for i in np.flatnonzero(self._scores >= threshold) if i != m.member_id]
        if not top:
            return False
        donor = self.members[top[int(self.rng.integers(len(top)))]]
        self.exploits.append({"trial": trial_id, "member": m.member_id, "donor": donor.member_id,
                              "donor_trial": donor.source, "retired_arch": dict(m.arch)})
        m.arch, m.hparams = dict(donor.arch), self._explore(donor.hparams)
        m.source, m.epoch, m.score, m.inherit = donor.source, donor.epoch, None, False
        if self.arch_mutation and self.rng.random() < self.arch_mutation:  # (no draw by default: same asks)
            m.arch, m.epoch, m.inherit = self.space.mutate(donor.arch, self.rng), 0, True
        self._scores[m.member_id] = np.nan  # ranked again after its next segment
        return True

    def architectures(self) -> list[Arch]:
        """The population's current architectures, one per member."""
        return [m.arch for m in self.members]

    # -- state ---------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "members": [{**vars(m), "arch": dict(m.arch), "hparams": dict(m.hparams)} for m in self.members],
            "ready": list(self.ready), "running": sorted(self.running), "checkpoints": self.checkpoints,
            "exploits": [dict(e) for e in self.exploits],
            "restarted": sorted(self._restarted), "fresh_next": sorted(self._fresh_next),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.members = [Member(**m) for m in state["members"]]
        self.ready = collections.deque(int(i) for i in state["ready"])
        self.running = {int(i) for i in state["running"]}
        self.checkpoints = bool(state["checkpoints"])
        self.exploits = collections.deque((dict(e) for e in state["exploits"]), maxlen=EXPLOITS_KEPT)
        self._restarted = {int(i) for i in state["restarted"]}
        self._fresh_next = {int(i) for i in state["fresh_next"]}
        self._scores = np.array([np.nan if m.score is None else m.score for m in self.members], dtype=float)
