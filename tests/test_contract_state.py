"""The strategy contract, continued (tests/test_contract.py has the rest): over every registered strategy, what a
snapshot must carry besides the asks and tells: a warm start from an earlier run, the longer results of promoted
trials (``update``), and a proxy warm-up's ranked candidates; and a warm start changes what a strategy that takes
one asks. Each is a snapshot mid-run, written to disk, read into a strategy built with another seed (and no warm
start), which must then ask exactly what the uninterrupted one asks."""

from __future__ import annotations

import numpy as np
import pytest
from test_contract import Driver, drive

from nas.core.registry import strategies
from nas.core.types import Outcome, Result, Trial
from nas.parts import make_strategy
from nas.run.snapshot import read_snapshot, write_snapshot
from nas.search_spaces.toy import ToySpace, toy_score
from nas.strategies.warmup import ProxyWarmup, warm_up

STRATEGIES = strategies.names()


def takes_warm_start(name):
    try:
        make_strategy(name, ToySpace(), seed=0).warm_start(*earlier_run(1)[0])
    except ValueError:  # refused in one line (tests/test_contract.py checks how)
        return False
    return True



PROXY_WARMUP = [n for n in STRATEGIES if issubclass(strategies.get(n), ProxyWarmup)]
SPACE = ToySpace()


def earlier_run(n=8, seed=11):
    """``n`` finished trials of an earlier run (negative ids), the toy optimum among them."""
    rng = np.random.default_rng(seed)
    archs = [SPACE.sample(rng) for _ in range(n - 1)] + [{"d0": 3, "d1": 1, "d2": 4, "d3": 2, "d4": 3}]
    return [(Trial(-1 - i, a), Result(-1 - i, Outcome.COMPLETE, score=toy_score(a), scores=[toy_score(a)], epoch=1))
            for i, a in enumerate(archs)]


WARM_STARTABLE = [n for n in STRATEGIES if takes_warm_start(n)]


def resumes_identically(original, tmp_path, *, options=None, steps=15):
    """Snapshot ``original`` (a Driver mid-run), restore it into a fresh strategy with another seed, compare."""
    write_snapshot(tmp_path / "strategy.json", original.strategy.state_dict())
    name = original.strategy.name
    restored = Driver(make_strategy(name, SPACE, seed=999, options=options), pending=original.pending,
                      told=original.told, in_flight=original.in_flight)
    restored.strategy.load_state_dict(read_snapshot(tmp_path / "strategy.json"))
    a, b = original.steps(steps), restored.steps(steps)
    assert a, "the strategy asked nothing after the snapshot"
    assert [t.to_dict() for t in a] == [t.to_dict() for t in b]


@pytest.mark.parametrize("name", WARM_STARTABLE)
def test_a_warm_start_is_kept_through_a_snapshot(name, tmp_path):
    strategy = make_strategy(name, SPACE, seed=3)
    for trial, result in earlier_run():
        strategy.warm_start(trial, result)
    original = Driver(strategy)
    original.steps(10)
    resumes_identically(original, tmp_path)


@pytest.mark.parametrize("name", [n for n in WARM_STARTABLE if n != "random"])
def test_a_warm_start_changes_what_is_asked(name):
    """Same seed, with and without the earlier run: the asks differ (random only avoids what ran before;
    evolution's differ once its population, which the earlier run joined, is full)."""
    warm = make_strategy(name, SPACE, seed=3)
    for trial, result in earlier_run():
        warm.warm_start(trial, result)
    cold = make_strategy(name, SPACE, seed=3)
    assert [t.arch for t in drive(warm, 100)] != [t.arch for t in drive(cold, 100)]


@pytest.mark.parametrize("name", ["local", "predictor"])
def test_local_and_predictor_are_among_the_strategies_that_take_a_warm_start(name):
    assert name in WARM_STARTABLE and name in PROXY_WARMUP
    assert strategies.get(name).multi_objective == "scalarize"  # several objectives: ParEGO's scalarization


class Promoting(Driver):
    """A Driver that also tells every third finished trial its longer result (``update``: a promotion to 200
    epochs, scoring higher), as a scheduler's promotion does."""

    def steps(self, n):
        asked = []
        for _ in range(n):
            before = list(self.pending)
            asked += super().steps(1)
            done = next(t for t in before + asked if t not in self.pending)
            if self.told % 3 == 0:
                score = toy_score(done.arch) + 0.5
                self.strategy.update(done, Result(done.trial_id, Outcome.COMPLETE, score=score, scores=[score],
                                                  epoch=200))
        return asked


@pytest.mark.parametrize("name", STRATEGIES)
def test_promoted_results_are_kept_through_a_snapshot(name, tmp_path):
    original = Promoting(make_strategy(name, SPACE, seed=3))
    original.steps(25)
    write_snapshot(tmp_path / "strategy.json", original.strategy.state_dict())
    restored = Promoting(make_strategy(name, SPACE, seed=999), pending=original.pending, told=original.told)
    restored.strategy.load_state_dict(read_snapshot(tmp_path / "strategy.json"))
    a, b = original.steps(15), restored.steps(15)
    assert a and [t.to_dict() for t in a] == [t.to_dict() for t in b]


@pytest.mark.parametrize("name", PROXY_WARMUP)
def test_a_proxy_warm_up_is_kept_through_a_snapshot(name, tmp_path):
    """The warm-up's ranked candidates (params stands for the proxy: the sum of the decisions) half handed out
    when the snapshot is taken; the restored strategy hands out the rest, in order, and then what the original
    asks."""
    options = {"warmup": "params:40:8"}
    strategy = make_strategy(name, SPACE, seed=3, options=options)
    assert warm_up(strategy, lambda archs: [float(sum(a.values())) for a in archs])
    original = Driver(strategy, in_flight=1)
    first = original.steps(4)
    assert sum(first[0].arch.values()) >= sum(first[-1].arch.values())  # best first
    resumes_identically(original, tmp_path, options=options)
