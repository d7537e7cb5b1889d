"""The RL controller (Zoph & Le 2017): sampling, REINFORCE updates, purity and search quality (no Ray)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import toy_search

from nas.core.registry import spaces
from nas.core.types import Outcome, Result
from nas.search_spaces.toy import TOY_OPTIMUM, ToySpace, toy_score
from nas.strategies.random import RandomSearch
from nas.strategies.rl import RLController


def complete(trial, score):
    return Result(trial.trial_id, Outcome.COMPLETE, score=score)


def run(strategy, budget):
    return toy_search(strategy, budget, in_flight=3)


def test_one_action_per_decision_in_encode_order_on_every_space():
    for name in spaces.names():
        space = spaces.get(name)()
        rl = RLController(space, seed=0)
        t = rl.ask()
        assert rl.pending[t.trial_id] == space.encode(t.arch)
        assert [len(p) for p in rl.probabilities()] == space.cardinalities


def test_policy_updates_every_batch_and_asks_never_wait():
    rl = RLController(ToySpace(), batch=4, seed=0)
    asked = [rl.ask() for _ in range(10)]  # ten asks with no result yet: nothing blocks
    before = [p.detach().clone() for p in rl.policy.parameters()]
    for i, t in enumerate(asked[:7]):
        rl.tell(t, complete(t, toy_score(t.arch)))
        assert rl.updates == (i + 1) // 4
    assert any(not torch.equal(a, b) for a, b in zip(before, rl.policy.parameters()))
    assert len(rl.buffer) == 3 and len(rl.pending) == 3


def test_failed_trials_give_no_reward():
    rl = RLController(ToySpace(), batch=2, seed=0)
    a, b = rl.ask(), rl.ask()
    rl.tell(a, Result.failed(a.trial_id, "NaN loss"))
    assert rl.rewards_seen == 0 and a.trial_id not in rl.pending and not rl.buffer
    rl.tell(b, complete(b, -3.0))
    assert rl.rewards_seen == 1 and rl.baseline == -3.0


def test_baseline_is_an_exponential_moving_average():
    rl = RLController(ToySpace(), baseline_decay=0.5, batch=100, seed=0)
    for score in [4.0, 2.0, 6.0]:
        t = rl.ask()
        rl.tell(t, complete(t, score))
    assert rl.baseline == pytest.approx(0.5 * (0.5 * 4.0 + 0.5 * 2.0) + 0.5 * 6.0)


def test_torch_global_rng_and_thread_count_are_left_alone():
    state, threads = torch.random.get_rng_state(), torch.get_num_threads()
    rl = RLController(ToySpace(), batch=2, seed=0)
    for _ in range(4):
        t = rl.ask()
        rl.tell(t, complete(t, toy_score(t.arch)))
    assert torch.equal(state, torch.random.get_rng_state()) and torch.get_num_threads() == threads


def test_the_policy_concentrates_on_the_known_optimum():
    """Uniform sampling gives the optimum 1/3,125; after 300 trials most seeds' policies give it > 0.3."""
    def p_optimum(rl):
        return np.prod([p[TOY_OPTIMUM[k]] for k, p in zip(TOY_OPTIMUM, rl.probabilities(TOY_OPTIMUM))])

    learned = []
    for seed in range(4):
        rl = RLController(ToySpace(), seed=seed)
        assert p_optimum(rl) < 0.01
        run(rl, 300)
        learned.append(p_optimum(rl))
    assert sum(p > 0.3 for p in learned) >= 3, learned


def test_rl_beats_random_search():
    """20 fixed seeds, 200 trials each (3 in flight) in a 3,125-cell space with a unique optimum."""
    rl = [run(RLController(ToySpace(), seed=s), 200) for s in range(20)]
    rnd = [run(RandomSearch(ToySpace(), seed=s), 200) for s in range(20)]
    assert np.mean(rl) > np.mean(rnd) + 0.5
    assert sum(b == 0.0 for b in rl) >= 2 * max(1, sum(b == 0.0 for b in rnd))


@pytest.mark.parametrize(("options", "message"), [
    ({"lr": 0}, "lr must be a number > 0, got 0"),
    ({"temperature": -1.0}, "temperature must be a number > 0"),
    ({"baseline_decay": 1.5}, "baseline_decay must be in"),
    ({"entropy_weight": -0.1}, "entropy_weight must be in"),
    ({"batch": 0}, "batch must be an integer >= 1, got 0"),
    ({"hidden": 2.5}, "hidden must be an integer"),
])
def test_bad_options_are_named(options, message):
    with pytest.raises(ValueError, match=message):
        RLController(ToySpace(), **options)
