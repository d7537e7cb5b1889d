"""Local search: climb from an incumbent through its one-edit neighbours, restart at a local optimum.

White, Nolen & Savani 2021, "Exploring the Loss Landscape in Neural Architecture Search" (UAI; the arXiv version:
"Local Search is State of the Art for Neural Architecture Search Benchmarks"), Algorithm 1, made asynchronous:

- A start: ``init`` random cells (or, with a ``warmup``, the proxy's best not yet tried); the best of their results
  becomes the incumbent.
- The incumbent's neighbours (every architecture one decision away, from :meth:`nas.core.space.SearchSpace.dims`)
  not evaluated recently and not in flight are queued in random order and handed to free workers in parallel.
- ``move="first"`` (the default): the first result better than the incumbent becomes the incumbent at once, and
  its neighbours replace the queue. ``move="best"``: the whole neighbourhood is evaluated first, then the search
  moves to the best of it if that beats the incumbent.
- A neighbour remembered from an earlier climb counts as evaluated, without a trial: the best one better than the
  incumbent is moved to at once (``"first"``) or competes for the best of the neighbourhood (``"best"``).
- A local optimum (every neighbour evaluated, none better, none in flight) starts afresh.

While the last neighbours of an incumbent are in flight and none is left to hand out, :meth:`LocalSearch.ask`
answers None (the loop waits for a result). Results of a trial a scheduler stopped or paused at a rung, and the
longer results of promoted ones (:meth:`LocalSearch.update`), are compared like with like
(:mod:`nas.strategies.fidelity`).

The state stays O(neighbourhood), however long the run: the incumbent, its queue, the trials in flight and the
scores of the last ``memory`` evaluated architectures (default: four neighbourhoods), which is what keeps a climb
from re-evaluating the cells it just came from; a restart far away may, rarely, meet an older one again.

>>> from nas.search_spaces.toy import ToySpace, toy_score
>>> from nas.core.types import Outcome, Result
>>> ls = LocalSearch(ToySpace(), init=1, seed=0)
>>> found = []
>>> for _ in range(60):
...     t = ls.ask()
...     found.append(toy_score(t.arch))
...     ls.tell(t, Result(t.trial_id, Outcome.COMPLETE, score=found[-1], epoch=1))
>>> max(found), found.index(0.0) < 40, ls.restarts  # the optimum, then restarts from it, its only local optimum
(0.0, True, 2)
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import Any

from nas.core.registry import register_strategy
from nas.core.space import SearchSpace
from nas.core.strategy import Strategy, check_positive_int
from nas.core.types import Arch, Result, Trial
from nas.strategies.fidelity import Fidelities, add, better, from_data, to_data
from nas.strategies.random import fingerprint
from nas.strategies.warmup import ProxyWarmup, make_pool


def neighbours(space: SearchSpace, arch: Arch) -> list[dict[str, Any]]:
    """Every architecture one decision away from ``arch``, in declaration order.

    >>> from nas.search_spaces.toy import ToySpace
    >>> len(neighbours(ToySpace(), {"d0": 0, "d1": 0, "d2": 0, "d3": 0, "d4": 0}))
    20
    """
    out = []
    for name, options in space.decisions.items():
        for option in options:
            if option != arch[name]:
                out.append({**arch, name: option})
    return out


@register_strategy("local")
class LocalSearch(ProxyWarmup, Strategy):
    """Options: ``init`` (cells evaluated at each start, the best becoming the incumbent; default 10: on the
    NAS-Bench-201 protocol it ends on better cells than 1 on CIFAR-10 and CIFAR-100, ``nas bench strategies``), ``move``
    (``"first"``, default, or ``"best"``: see the module docstring), ``memory`` (recent evaluations remembered;
    default four neighbourhoods, at least 64), ``warmup`` (``"PROXY:M:K"``: starts take the proxy's top K of M
    random cells, best first, before any random one; :mod:`nas.strategies.warmup`)."""

    def __init__(self, space: SearchSpace, *, seed: int | None = None, init: int = 10, move: str = "first",
                 memory: int | None = None, warmup: str | None = None) -> None:
        super().__init__(space, seed=seed)
        self.init = check_positive_int("init", init)
        if move not in ("first", "best"):
            raise ValueError(f"move must be 'first' or 'best', got {move!r}")
        self.move = move
        size = sum(len(o) - 1 for o in space.decisions.values())
        self.memory_size = max(64, 4 * size) if memory is None else check_positive_int("memory", memory)
        self.warmup_pool = make_pool(warmup)
        self.incumbent: dict[str, Any] | None = None
        self.incumbent_scores: Fidelities = {}
        self.queue: list[dict[str, Any]] = []  # neighbours still to hand out, next last
        self.pending: dict[int, dict[str, Any]] = {}  # trial id -> arch, in flight
        self.memory: collections.OrderedDict[int, Fidelities] = collections.OrderedDict()  # fingerprint -> scores
        self.start_left = self.init  # cells still to ask in this start
        self.start_ids: set[int] = set()  # this start's cells in flight
        self.best_seen: tuple[dict[str, Any], Fidelities] | None = None  # the start's, or ("best") the neighbourhood's
        self.restarts = 0
        self.climbed: set[int] = set()  # the cells this climb has held as incumbent (a move never returns to one)

    # -- asking ----------------------------------------------------------------------------------
    def ask(self) -> Trial | None:
        if self.incumbent is None:
            return self._ask_start()
        if self.queue:
            return self._submit(self.queue.pop())
        if self.pending:
            return None  # the last neighbours are in flight: their results decide
        if self.move == "best" and self.best_seen is not None:
            self._move_to(*self.best_seen)
            return self.ask()
        self.restarts += 1  # a local optimum
        self._restart()
        return self._ask_start()

    def _ask_start(self) -> Trial | None:
        if self.start_left == 0:
            if self.start_ids or self.pending:
                return None
            self._restart()  # every cell of the start failed
        arch = self._start_arch()  # (first: a warm-up not yet answered raises, changing nothing)
        self.start_left -= 1
        trial = self._submit(arch)
        self.start_ids.add(trial.trial_id)
        return trial

    def _start_arch(self) -> dict[str, Any]:
        if self.warmup_pool is not None:
            for arch in self.warmup_pool.take(1):
                return arch
        arch = self.space.sample(self.rng)
        for _ in range(10):  # a cell not evaluated recently, where one is easily found
            if fingerprint(arch) not in self.memory and not self._in_flight(arch):
                break
            arch = self.space.sample(self.rng)
        return arch

    def _submit(self, arch: dict[str, Any]) -> Trial:
        trial = self.trial(arch)
        self.pending[trial.trial_id] = dict(arch)
        return trial

    def _in_flight(self, arch: Arch) -> bool:
        return any(a == arch for a in self.pending.values())

    def _restart(self) -> None:
        self.incumbent, self.incumbent_scores, self.queue, self.best_seen = None, {}, [], None
        self.start_left, self.start_ids, self.climbed = self.init, set(), set()

    def _move_to(self, arch: dict[str, Any], scores: Fidelities) -> None:
        # (a neighbour an earlier climb evaluated was never compared: with it better, the incumbent was taken for a
        # local optimum and the search restarted) a remembered better neighbour is moved to at once, for free; a
        # climb holds each cell once (scores at several fidelities compare at the highest both have, which is not
        # transitive: a walk A < B < C < A went round for ever, the driver spinning in tell, or with move="best"
        # in ask, to a RecursionError)
        self.climbed.add(fingerprint(arch))
        remembered = self._best_remembered(arch, scores)
        while self.move == "first" and remembered is not None:
            arch, scores = remembered
            self.climbed.add(fingerprint(arch))
            remembered = self._best_remembered(arch, scores)
        best_seen = remembered if self.move == "best" else None
        self.incumbent, self.incumbent_scores, self.best_seen = dict(arch), dict(scores), best_seen
        fresh = [n for n in neighbours(self.space, arch)
                 if fingerprint(n) not in self.memory and not self._in_flight(n)]
        order = self.rng.permutation(len(fresh))
        self.queue = [fresh[int(i)] for i in order]

    def _best_remembered(self, arch: Arch, scores: Fidelities) -> tuple[dict[str, Any], Fidelities] | None:
        """The best neighbour of ``arch`` in memory whose scores beat ``scores``, if one does, and which this climb
        has not held already."""
        reference, best = self._reference(), None
        for n in neighbours(self.space, arch):
            if fingerprint(n) in self.climbed:
                continue
            known = self.memory.get(fingerprint(n))
            if known and better(known, scores, reference) and (best is None or better(known, best[1], reference)):
                best = (n, known)
        return best

    # -- results ---------------------------------------------------------------------------------
    def tell(self, trial: Trial, result: Result) -> None:
        arch = self.pending.pop(trial.trial_id, None) or dict(trial.arch)
        key = fingerprint(arch)
        scores = add(dict(self.memory.get(key, {})), result)
        self._remember(key, scores)  # a failed cell too (no scores): it is not asked again soon
        self.start_ids.discard(trial.trial_id)
        if scores:
            self._consider(arch, scores)
        if self.incumbent is None and self.start_left == 0 and not self.start_ids and self.best_seen is not None:
            self._move_to(*self.best_seen)  # the start is complete: its best is the incumbent

    def update(self, trial: Trial, result: Result) -> None:
        """A promoted trial's longer result: its architecture's score at that fidelity, compared like with like."""
        key = fingerprint(trial.arch)
        scores = add(dict(self.memory.get(key, {})), result)
        if not scores:
            return
        self._remember(key, scores)
        self._consider(dict(trial.arch), scores)

    def _consider(self, arch: dict[str, Any], scores: Fidelities) -> None:
        if self.incumbent is not None and arch == self.incumbent:
            self.incumbent_scores = dict(scores)
            return
        if self.incumbent is None or self.move == "best":  # a start, or a neighbourhood evaluated in full
            reference = self._reference()
            if (self.best_seen is None or better(scores, self.best_seen[1], reference)) and \
                    (self.incumbent is None or better(scores, self.incumbent_scores, reference)):
                self.best_seen = (dict(arch), dict(scores))
            return
        if better(scores, self.incumbent_scores, self._reference()):
            self._move_to(arch, scores)

    def _reference(self) -> list[Fidelities]:
        """The recent results, where two scores of different fidelities must be ranked (:mod:`.fidelity`)."""
        return [s for s in self.memory.values() if s]

    def _remember(self, key: int, scores: Fidelities) -> None:
        self.memory[key] = scores
        self.memory.move_to_end(key)
        while len(self.memory) > self.memory_size:
            self.memory.popitem(last=False)

    def warm_start(self, trial: Trial, result: Result) -> None:
        """A finished trial of an earlier run (:mod:`nas.run.warmstart`): remembered, and the best of them is the
        first incumbent (as the best of a start)."""
        scores = add({}, result)
        self._remember(fingerprint(trial.arch), scores)
        if scores and (self.best_seen is None or better(scores, self.best_seen[1], self._reference())):
            self.best_seen = (dict(trial.arch), scores)
            self.start_left = 0
            if not self.start_ids:
                self._move_to(*self.best_seen)

    # -- state -----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "incumbent": self.incumbent, "incumbent_scores": to_data(self.incumbent_scores),
            "queue": self.queue, "pending": dict(self.pending),
            "memory": [[k, to_data(s)] for k, s in self.memory.items()],
            "start_left": self.start_left, "start_ids": sorted(self.start_ids),
            "best_seen": None if self.best_seen is None else [self.best_seen[0], to_data(self.best_seen[1])],
            "restarts": self.restarts, "climbed": sorted(self.climbed),
            "warmup": None if self.warmup_pool is None else self.warmup_pool.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.incumbent = None if state["incumbent"] is None else dict(state["incumbent"])
        self.incumbent_scores = from_data(state["incumbent_scores"])
        self.queue = [dict(a) for a in state["queue"]]
        self.pending = {int(k): dict(v) for k, v in state["pending"].items()}
        self.memory = collections.OrderedDict((int(k), from_data(s)) for k, s in state["memory"])
        self.start_left = int(state["start_left"])
        self.start_ids = {int(i) for i in state["start_ids"]}
        self.climbed = {int(i) for i in state.get("climbed", ())}  # (none in a snapshot of before)
        best = state["best_seen"]
        self.best_seen = None if best is None else (dict(best[0]), from_data(best[1]))
        self.restarts = int(state["restarts"])
        if self.warmup_pool is not None and state["warmup"] is not None:
            self.warmup_pool.load_state_dict(state["warmup"])
