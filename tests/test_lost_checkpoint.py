"""A trial whose kept checkpoint to continue from is gone ends FAILED with CHECKPOINT_MISSING, and the search goes on
(Ray executor); a child whose parent's weights to inherit are gone trains from scratch, its metrics say so.

Two ways a checkpoint goes: the executor no longer keeps it (evicted: it keeps a bounded number), so the trial fails
at its submission; or its handle is kept but the object behind it is lost, so the worker's fetch fails. Both are
provoked at a known point of a real search and checked to have happened."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import pytest

from nas.core.strategy import Strategy
from nas.core.types import FailureKind, Outcome, Result, Trial
from nas.engine.interfaces import Callback, LoopStatus
from nas.engine.loop import SearchLoop
from nas.engine.ray_pool import RayExecutor
from nas.search_spaces.toy import ToySpace

pytestmark = pytest.mark.ray

ARCH = {"d0": 4, "d1": 3, "d2": 2, "d3": 1, "d4": 1}


class Script(Strategy):
    """Asks the given trials' fields in order, each once the one before it was told."""

    def __init__(self, steps: list[dict[str, Any]]) -> None:
        super().__init__(ToySpace(), seed=0)
        self.steps = steps
        self.told: list[Result] = []

    def ask(self) -> Trial | None:
        if self.asked >= len(self.steps) or len(self.told) < self.asked:
            return None
        return self.trial(ARCH, **self.steps[self.asked])

    def tell(self, trial: Trial, result: Result) -> None:
        self.told.append(result)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        pass


class LoseCheckpoint(Callback):
    """Once trial ``after`` ends, the kept checkpoint of trial ``of`` becomes a reference to an object that is gone:
    the process making it died before it was stored (a task that exits), as one kept on a node that left the cluster
    is gone."""

    def __init__(self, executor: RayExecutor, of: int, after: int) -> None:
        self.executor, self.of, self.after, self.lost = executor, of, after, False

    def on_result(self, status: LoopStatus, trial: Trial, result: Result) -> None:
        import ray

        @ray.remote(num_cpus=0, max_retries=0)
        def dies() -> bytes:
            os._exit(1)

        if trial.trial_id == self.after:
            ref = dies.remote()
            ray.wait([ref])  # (it has failed before the next trial is asked)
            self.executor.checkpoints.put(self.of, ref)
            self.lost = True


def test_a_trial_whose_checkpoint_is_gone_fails_alone(ray_local):
    def keeps_a_checkpoint(ctx: Any) -> None:  # (defined here: the workers get it by value)
        """Reports once; where its checkpoint is kept, it is a tiny state (made only then)."""
        ctx.checkpoint.provide(lambda: {"step": 1})
        ctx.report(epoch=1, val_acc=0.5)

    steps = [{"save_checkpoint": True}, {"save_checkpoint": True},  # the executor keeps one: trial 0's is evicted
             {"checkpoint_from": 0}, {"inherit_from": 0},  # gone: no handle is kept
             {"checkpoint_from": 1},  # kept: it starts from it (then its object is lost)
             {"inherit_from": 1},  # lost: the worker's fetch fails (a child trains from scratch: inheriting is a
             {}]  # head start, not a need)
    strategy = Script(steps)
    ex = RayExecutor(ToySpace(), None, workers=1, train=keeps_a_checkpoint, cpus_per_trial=0.5, prefetch=False)
    ex.checkpoints.keep = 1
    lose = LoseCheckpoint(ex, of=1, after=4)
    try:
        SearchLoop(strategy, ex, budget=len(steps), callbacks=[lose], poll_timeout=0.5).run()
    finally:
        ex.shutdown()
    outcomes = [(r.outcome, r.failure) for r in strategy.told]
    missing = (Outcome.FAILED, FailureKind.CHECKPOINT_MISSING)
    complete = (Outcome.COMPLETE, None)
    assert lose.lost and outcomes == [complete, complete, missing, complete, complete, complete, complete]
    assert "no checkpoint is kept for trial 0" in (strategy.told[2].error or "")
    assert strategy.told[3].metrics["inherit_missing"] == 0 and strategy.told[5].metrics["inherit_missing"] == 1
