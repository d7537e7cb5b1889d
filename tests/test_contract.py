"""Contract tests: every registered strategy and every registered space passes the same suite.

A new strategy or space is covered here the moment it registers; its own test file adds what is
particular to it.
"""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import torch

from nas.api import make_strategy
from nas.registry import spaces, strategies
from nas.search_spaces.toy import ToySpace, toy_score
from nas.space import SearchSpace, Task
from nas.types import Result, TrialState

STRATEGIES = strategies.names()
SPACES = spaces.names()
TASK = Task(input_shape=(1, 8, 8), num_classes=10)


def outcome(trial, i):
    """Every fifth trial fails; the rest score by the toy objective (or a hash of the arch)."""
    if i % 5 == 4:
        return Result.failed(trial.trial_id, "candidate raised")
    try:
        score = toy_score(trial.arch)
    except KeyError:
        score = float(sum(map(ord, repr(sorted(trial.arch.items())))) % 97)
    return Result(trial.trial_id, TrialState.COMPLETE, score=score, epoch=1)


def drive(strategy, n, *, in_flight=3):
    """Ask/tell with up to ``in_flight`` outstanding trials (as an asynchronous loop does)."""
    asked, pending, i = [], [], 0
    while len(asked) < n or pending:
        while len(asked) < n and len(pending) < in_flight:
            t = strategy.ask()
            if t is None:
                break
            asked.append(t)
            pending.append(t)
        assert pending, "strategy proposed nothing while no trial was pending"
        t = pending.pop(0)
        strategy.tell(t, outcome(t, i))
        i += 1
    return asked


@pytest.mark.parametrize("name", STRATEGIES)
@pytest.mark.parametrize("space_name", SPACES)
def test_asks_stay_inside_the_space_and_failures_are_tolerated(name, space_name):
    space = spaces.get(space_name)()
    trials = drive(make_strategy(name, space, seed=0), 40)
    ids = [t.trial_id for t in trials]
    assert len(set(ids)) == len(ids)
    for t in trials:
        space.validate(t.arch)
        assert t.strategy == name


@pytest.mark.parametrize("name", STRATEGIES)
def test_same_seed_same_asks(name):
    a = drive(make_strategy(name, ToySpace(), seed=7), 30)
    b = drive(make_strategy(name, ToySpace(), seed=7), 30)
    assert [t.to_dict() for t in a] == [t.to_dict() for t in b]


@pytest.mark.parametrize("name", STRATEGIES)
def test_state_dict_round_trip_resumes_identically(name):
    original = make_strategy(name, ToySpace(), seed=3)
    drive(original, 25)
    state = pickle.loads(pickle.dumps(original.state_dict()))  # what a resume reads back from disk
    restored = make_strategy(name, ToySpace(), seed=999)
    restored.load_state_dict(copy.deepcopy(state))
    a, b = drive(original, 20), drive(restored, 20)
    assert [t.to_dict() for t in a] == [t.to_dict() for t in b]


@pytest.mark.parametrize("name", STRATEGIES)
def test_unknown_options_are_named(name):
    with pytest.raises(ValueError, match="unknown options \\['no_such_option'\\]"):
        make_strategy(name, ToySpace(), options={"no_such_option": 1})


@pytest.mark.parametrize("space_name", SPACES)
def test_every_space_builds_trainable_models(space_name):
    space: SearchSpace = spaces.get(space_name)()
    rng = np.random.default_rng(0)
    x = torch.randn(4, *TASK.input_shape)
    for _ in range(5):
        arch = space.sample(rng)
        model = space.check_build(arch, TASK)
        out = model(x)
        assert out.shape == (4, TASK.num_classes)
        assert torch.isfinite(out).all()
        out.sum().backward()
        assert space.decode(space.encode(arch)) == arch
        assert space.parse(space.format(arch)) == arch
        assert sum(arch[k] != v for k, v in space.mutate(arch, rng).items()) == 1
