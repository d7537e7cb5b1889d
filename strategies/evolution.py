"""Regularized (aging) evolution: tournament selection, mutation, the oldest member dies.

Real et al. 2019, "Regularized Evolution for Image Classifier Architecture Search", Algorithm 1,
made asynchronous.

- Asks are random architectures until ``population`` of them have joined (the initial population, Algorithm 1's
  "while |population| < P"): a random ask still in flight counts toward it, a failed one (an error, an
  INFEASIBLE cell) does not, and another random one takes its place.
- Every later ask samples ``sample_size`` members uniformly at random from the current population,
  takes the best of them as parent, and proposes a one-decision mutation of its architecture.
- Every completed result joins the population; when it holds more than ``population`` members the
  OLDEST is removed (age, not fitness: that is the regularization).

There is no generation barrier: asks made while the initial population is still training use the
members that have finished so far, and are random while none has.

Fidelities: with a scheduler (ASHA, Hyperband), a result may come from a trial stopped or paused at a rung (12
epochs, say) and a promoted trial's longer result arrives later (:meth:`RegularizedEvolution.update`). Each member
keeps its score per fidelity, the later one included while it lives, and the tournament compares the sampled
members like with like: at the highest fidelity they all share, or, where they share none, by their ranks within
the population at their own fidelities (:mod:`nas.strategies.fidelity`); never a 12-epoch score against a 200-epoch
one. (With several objectives the Pareto ranks use each member's latest scores.)

With a ``warmup`` (``"PROXY:M:K"``, Mellor et al. 2021's AREA), the first K asks are the top K of M random
architectures by a zero-cost proxy (:mod:`nas.strategies.warmup`) instead of random ones.

Multi-objective (several ``objectives``, or results whose ``scores`` hold more than one value): the
tournament picks the sampled member of lowest Pareto rank within the population, ties broken by the
largest crowding distance within its front (NSGA-II's crowded comparison, Deb et al. 2002, "A Fast and
Elitist Multiobjective Genetic Algorithm: NSGA-II"); every result still joins and the OLDEST still dies.
FAILED trials (INFEASIBLE ones included) never join, so never reach the front.

>>> from nas.search_spaces.toy import ToySpace, toy_score
>>> from nas.core.types import Result, TrialState
>>> evo = RegularizedEvolution(ToySpace(), population=8, sample_size=3, seed=0)
>>> for _ in range(60):
...     t = evo.ask()
...     evo.tell(t, Result(t.trial_id, TrialState.COMPLETE, score=toy_score(t.arch)))
>>> len(evo.population), max(m.score for m in evo.population)
(8, 0.0)
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from nas.core.objectives import Objectives, crowding_distance, pareto_ranks
from nas.core.registry import register_strategy
from nas.core.space import SearchSpace
from nas.core.strategy import Strategy, check_bool, check_positive_int
from nas.core.types import Arch, Result, Trial, arch_key
from nas.strategies.fidelity import Fidelities, add, best_of, from_data, to_data
from nas.strategies.warmup import ProxyWarmup, make_pool


@dataclasses.dataclass(frozen=True)
class Member:
    trial_id: int
    arch: Arch
    score: float  # at its highest fidelity
    scores: list[float] | None = None  # every objective, higher-is-better, when there are several
    fidelities: Fidelities = dataclasses.field(default_factory=dict)  # epochs -> score ({0: score}: not known)

    def __post_init__(self) -> None:
        if not self.fidelities:
            self.fidelities[0] = self.score  # a member of a snapshot written before fidelities were kept


@register_strategy("evolution")
class RegularizedEvolution(ProxyWarmup, Strategy):
    """Options: ``population`` (P, default 50), ``sample_size`` (S, default 10, at most P), ``dedup``
    (re-mutate up to a few times when a child is already in the population or in flight; default False,
    as in the paper). Dedup looks only at the living population and the trials in flight, not at every
    architecture ever asked: those are the ones a repeat would waste a slot beside, and the state (and its
    snapshot) stays O(population + in flight), not O(trials). ``objectives`` (the run's "metric:mode" specs,
    given by ``nas.search``, not a user option): with more than one, the multi-objective tournament of the
    module docstring ranks each result's ``scores``.

    ``inherit`` (default False): weight inheritance (Real et al. 2017): each child carries
    ``inherit_from=parent`` and starts from its parent's trained weights wherever a tensor's name and shape
    are unchanged (:mod:`nas.train.inherit`), and every trial keeps its checkpoint (so that it can be a
    parent). ``child_epochs``: with ``inherit``, the epochs a child trains (default: the run's).

    ``warmup`` (``"PROXY:M:K"``): the first K asks are the proxy's top K of M random architectures.

    >>> from nas.search_spaces.toy import ToySpace
    >>> from nas.core.types import Result, TrialState
    >>> evo = RegularizedEvolution(ToySpace(), objectives=["val_acc", "params:min"], population=4, sample_size=2,
    ...                            seed=0)
    >>> for _ in range(12):
    ...     t = evo.ask()
    ...     acc, params = sum(t.arch.values()) / 20, 100 * sum(t.arch.values()) + 10
    ...     evo.tell(t, Result(t.trial_id, TrialState.COMPLETE, score=acc, scores=[acc, -params]))
    >>> len(evo.population), len(evo.population[0].scores)
    (4, 2)
    """

    multi_objective = "native"

    def __init__(
        self,
        space: SearchSpace,
        *,
        seed: int | None = None,
        objectives: Sequence[str] | None = None,
        population: int = 50,
        sample_size: int = 10,
        dedup: bool = False,
        inherit: bool = False,
        child_epochs: int | None = None,
        warmup: str | None = None,
    ) -> None:
        super().__init__(space, seed=seed)
        self.objectives = Objectives(objectives) if objectives is not None else None
        self.capacity = check_positive_int("population", population)
        self.sample_size = check_positive_int("sample_size", sample_size)
        if self.sample_size > self.capacity:
            raise ValueError(
                f"sample_size must be <= population, got sample_size={sample_size}, population={population}"
            )
        self.dedup = check_bool("dedup", dedup)
        inherit = check_bool("inherit", inherit)
        if child_epochs is not None and not inherit:
            raise ValueError(f"child_epochs={child_epochs!r} needs inherit=true (children train from scratch "
                             "for the run's epochs otherwise)")
        self.inherit = inherit
        self.child_epochs = None if child_epochs is None else check_positive_int("child_epochs", child_epochs)
        self.warmup_pool = make_pool(warmup)
        self.population: collections.deque[Member] = collections.deque()  # oldest on the left
        self._inheriting: dict[int, int] = {}  # child asked, not told yet -> the parent it inherits from
        self._random_pending: set[int] = set()  # random asks of the initial population, not told yet
        self._in_flight: dict[int, str] = {}  # with dedup: trial id -> arch key, until its result
        self._taken: collections.Counter[str] = collections.Counter()  # with dedup: keys in population + flight

    def ask(self) -> Trial:
        # (random for the first P asks, not until P members had joined: with a constraint that made most random
        # cells INFEASIBLE, the first tournament of 5 ran on 2 members of 20)
        initial = len(self.population) + len(self._random_pending) < self.capacity or not self.population
        if self.warmup_pool is not None and (ranked := self.warmup_pool.take(1)):
            arch, parent = ranked[0], None
        elif initial:
            arch, parent = self.space.sample(self.rng), None
        else:
            parent_member = self._tournament()
            arch, parent = self._mutate(parent_member.arch), parent_member.trial_id
        trial = self.trial(arch, parent=parent, **self._inheritance(parent))
        if parent is None:
            self._random_pending.add(trial.trial_id)
        if self.inherit and parent is not None:
            self._inheriting[trial.trial_id] = parent
        if self.dedup:
            self._in_flight[trial.trial_id] = key = arch_key(arch)
            self._taken[key] += 1
        return trial

    def _inheritance(self, parent: int | None) -> dict[str, Any]:
        """The Trial fields of weight inheritance: every trial keeps its checkpoint, children inherit."""
        if not self.inherit:
            return {}
        if parent is None:
            return {"save_checkpoint": True}
        return {"save_checkpoint": True, "inherit_from": parent, "epochs": self.child_epochs}

    def _tournament(self) -> Member:
        k = min(self.sample_size, len(self.population))
        picks = self.rng.choice(len(self.population), size=k, replace=False)
        if self.population[0].scores is not None:
            return self._crowded_tournament([int(i) for i in picks])
        sample = [self.population[int(i)] for i in picks]
        return sample[best_of([m.fidelities for m in sample], [m.fidelities for m in self.population])]

    def _crowded_tournament(self, picks: list[int]) -> Member:
        """The pick of lowest Pareto rank in the population, then of largest crowding distance within its
        front; then the first picked (NSGA-II's crowded-comparison operator)."""
        points = [m.scores for m in self.population]
        ranks = pareto_ranks(points)
        best = min(int(ranks[i]) for i in picks)
        front = [i for i in range(len(points)) if ranks[i] == best]
        crowding = dict(zip(front, crowding_distance([points[i] for i in front]).tolist(), strict=True))
        winner = max((i for i in picks if ranks[i] == best), key=lambda i: crowding[i])  # first of equals
        return self.population[winner]

    def _scores(self, result: Result) -> list[float] | None:
        """The result's objectives when the run has several (None for a single-objective run)."""
        if self.objectives is not None:
            n = len(self.objectives)
        elif self.population:  # a run without declared objectives: as many as its first members had
            n = len(self.population[-1].scores or [0.0])
        else:
            n = len(result.scores or ())
        if n <= 1:
            return None
        scores = [float(s) for s in result.scores or ()]
        if len(scores) != n:
            raise ValueError(f"trial {result.trial_id}'s result has {len(scores)} scores; this evolution "
                             f"ranks {n} objectives")
        return scores

    def _mutate(self, arch: Arch) -> dict[str, Any]:
        child = self.space.mutate(arch, self.rng)
        if self.dedup:
            for _ in range(10):
                if arch_key(child) not in self._taken:
                    break
                child = self.space.mutate(arch, self.rng)
        return child

    def tell(self, trial: Trial, result: Result) -> None:
        self._inheriting.pop(trial.trial_id, None)
        self._random_pending.discard(trial.trial_id)
        key = self._in_flight.pop(trial.trial_id, None)
        if key is not None:
            self._release(key)
        if not result.ok or result.score is None:
            return  # a failed candidate never becomes a parent; it takes no place in the population
        self.population.append(Member(trial.trial_id, dict(trial.arch), float(result.score), self._scores(result),
                                      add({}, result)))
        if self.dedup:
            self._taken[arch_key(trial.arch)] += 1
        if len(self.population) > self.capacity:
            dead = self.population.popleft()  # the oldest dies, however good it was
            if self.dedup:
                self._release(arch_key(dead.arch))

    def update(self, trial: Trial, result: Result) -> None:
        """A promoted trial's longer result: its member, if it still lives, gains the score at that fidelity (and,
        with several objectives, that result's scores)."""
        if not result.ok or result.score is None:
            return
        for i, m in enumerate(self.population):
            if m.trial_id == trial.trial_id:
                fidelities = add(dict(m.fidelities), result)
                top = fidelities[max(fidelities)]
                scores = self._scores(result) if m.scores is not None else None
                self.population[i] = dataclasses.replace(m, score=top, scores=scores, fidelities=fidelities)
                return

    def warm_start(self, trial: Trial, result: Result) -> None:
        """A finished trial of an earlier run (:mod:`nas.run.warmstart`): it joins the population as a member
        of the initial population does, in place of one of its random asks."""
        self.tell(trial, result)

    def population_size(self) -> int:
        return len(self.population)

    def checkpoints_needed(self) -> int:
        return self.capacity if self.inherit else 0

    def expendable(self, kept: Sequence[int]) -> int | None:
        """With inheritance, the oldest kept trial that is no member (dead, or never one) and no parent of a child
        asked: dropping the oldest lost the parents of a population past the executor's bound (286 of 1,500
        children of a population of 400 failed as CHECKPOINT_MISSING)."""
        if not self.inherit:
            return None
        needed = {m.trial_id for m in self.population} | set(self._inheriting.values())
        return next((t for t in kept if t not in needed), None)

    def _release(self, key: str) -> None:
        self._taken[key] -= 1
        if self._taken[key] <= 0:
            del self._taken[key]

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "population": [self._member_data(m) for m in self.population],
            "random_pending": sorted(self._random_pending),
            "in_flight": dict(self._in_flight),
            "warmup": None if self.warmup_pool is None else self.warmup_pool.state_dict(),
        }

    @staticmethod
    def _member_data(m: Member) -> dict[str, Any]:
        data: dict[str, Any] = {"trial_id": m.trial_id, "arch": m.arch, "score": m.score,
                                "fidelities": to_data(m.fidelities)}
        if m.scores is not None:
            data["scores"] = m.scores
        return data

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.population = collections.deque(
            Member(**{**m, "fidelities": from_data(m.get("fidelities", ()))}) for m in state["population"])
        self._random_pending = {int(i) for i in state.get("random_pending", ())}  # (none in a snapshot of before)
        self._in_flight = {int(k): str(v) for k, v in state["in_flight"].items()}
        self._taken = collections.Counter(self._in_flight.values())
        if self.dedup:
            self._taken.update(arch_key(m.arch) for m in self.population)
        if self.warmup_pool is not None and state.get("warmup") is not None:
            self.warmup_pool.load_state_dict(state["warmup"])
