"""Contract tests: every registered strategy and every registered space passes the same suite.

A new strategy or space is covered here the moment it registers; its own test file adds what is
particular to it.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from nas.api import make_strategy
from nas.core.registry import spaces, strategies
from nas.core.space import SearchSpace, Task
from nas.core.types import Outcome, Result
from nas.run.snapshot import read_snapshot, write_snapshot
from nas.search_spaces.toy import ToySpace, toy_score

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
    return Result(trial.trial_id, Outcome.COMPLETE, score=score, epoch=1)


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


class Driver:
    """:func:`drive` one step at a time, so a snapshot can be taken with trials in flight."""

    def __init__(self, strategy, *, pending=(), told=0, in_flight=3):
        self.strategy, self.pending, self.told, self.in_flight = strategy, list(pending), told, in_flight

    def steps(self, n):
        """``n`` rounds of: ask until ``in_flight`` are out, then tell the oldest. Returns the asks."""
        asked = []
        for _ in range(n):
            while len(self.pending) < self.in_flight:
                t = self.strategy.ask()
                if t is None:
                    break
                asked.append(t)
                self.pending.append(t)
            t = self.pending.pop(0)
            self.strategy.tell(t, outcome(t, self.told))
            self.told += 1
        return asked


def snapshot_files_are_data(directory):
    """Every file of a snapshot is JSON or safetensors, none a pickle; returns their names."""
    names = sorted(p.name for p in directory.iterdir())
    for p in directory.iterdir():
        head = p.read_bytes()[:1]
        assert head != b"\x80", f"{p.name} is a pickle"
        assert head == b"{" or p.suffix == ".safetensors", f"{p.name} is neither JSON nor safetensors"
    return names


@pytest.mark.parametrize("name", STRATEGIES)
def test_snapshot_mid_run_resumes_identically(name, tmp_path):
    """Snapshots with trials in flight, written to disk and read back into a strategy built with another
    seed, ask exactly what the uninterrupted strategy asks, through several interleaved tells; and twice,
    so the second snapshot replaces the first in place."""
    original = Driver(make_strategy(name, ToySpace(), seed=3))
    original.steps(25)
    for _ in range(2):
        write_snapshot(tmp_path / "strategy.json", original.strategy.state_dict())
        restored = Driver(make_strategy(name, ToySpace(), seed=999), pending=original.pending, told=original.told)
        restored.strategy.load_state_dict(read_snapshot(tmp_path / "strategy.json"))
        a, b = original.steps(15), restored.steps(15)
        assert a, "the strategy asked nothing after the snapshot"
        assert [t.to_dict() for t in a] == [t.to_dict() for t in b]
        assert [t.to_dict() for t in original.pending] == [t.to_dict() for t in restored.pending]
    names = snapshot_files_are_data(tmp_path)
    assert names[0] == "strategy.json" and len(names) <= 2  # the JSON and at most one tensor file


@pytest.mark.parametrize("name", STRATEGIES)
def test_snapshot_does_not_grow_with_the_run(name, tmp_path):
    """Past a warm-up, a strategy's snapshot stays the same size however many trials run (optuna as the
    API runs it: its study in its own journal storage, since an in-memory study keeps every trial)."""
    options = {"storage": str(tmp_path / "optuna.journal")} if name == "optuna" else {}
    d = Driver(make_strategy(name, ToySpace(), seed=0, options=options))
    warm_up = {"random": 3200, "pbt": 800}.get(name, 200)  # past each bound (random's dedup window, pbt's log)
    sizes = []
    for _ in range(8):
        d.steps(warm_up // 4)
        sizes.append(write_snapshot(tmp_path / "s.json", d.strategy.state_dict()))
    assert max(sizes[4:]) <= max(sizes[:4]) * 1.1 + 200, sizes


class WritesMarker:
    """A pickle that, when loaded, creates a file: proof that loading it ran code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("protocol", [0, 2, pickle.HIGHEST_PROTOCOL])
def test_a_pickle_in_place_of_a_snapshot_is_refused_without_running_it(tmp_path, protocol):
    marker = tmp_path / "marker"
    path = tmp_path / "strategy.json"
    path.write_bytes(pickle.dumps({"state": WritesMarker(marker)}, protocol=protocol))
    with pytest.raises(ValueError, match="strategy.json"):
        read_snapshot(path)
    assert not marker.exists()
    pickle.loads(path.read_bytes())  # the test's own check that the file really would have run code
    assert marker.exists()


@pytest.mark.parametrize("name", STRATEGIES)
def test_unknown_options_are_named(name):
    with pytest.raises(ValueError, match="unknown options \\['no_such_option'\\]"):
        make_strategy(name, ToySpace(), options={"no_such_option": 1})


@pytest.mark.parametrize("name", STRATEGIES)
def test_capabilities_are_declared_and_hold(name):
    """What the loop and the API read of a strategy is declared on its class and does what it says: a native
    multi-objective strategy takes ``objectives`` and ranks two; a warm start is taken or refused in one line
    naming the strategy; ``population_size`` counts; a refusal says why."""
    from nas.api import build_strategy

    cls = strategies.get(name)
    assert cls.multi_objective in ("native", "scalarize", "refuse")
    if cls.multi_objective == "refuse" or cls.stops_own_trials:
        assert cls.refusal and "\n" not in cls.refusal
    if cls.multi_objective != "refuse":
        two = build_strategy(name, ToySpace(), 0, {}, ["val_acc", "params:min"])
        for i in range(12):
            t = two.ask()
            assert t is not None and t.trial_id == i
            a, b = toy_score(t.arch), -float(sum(t.arch.values()))
            two.tell(t, Result(t.trial_id, Outcome.COMPLETE, score=a, scores=[a, b], epoch=1))
    strategy = make_strategy(name, ToySpace(), seed=0)
    trial = strategy.trial({"d0": 3, "d1": 1, "d2": 4, "d3": 2, "d4": 3})
    warm = Result(-1, Outcome.COMPLETE, score=0.0, scores=[0.0], epoch=1)
    try:
        fresh = make_strategy(name, ToySpace(), seed=0)
        fresh.warm_start(trial.__class__(-1, trial.arch), warm)
        assert fresh.asked == 0  # a warm start asks nothing
    except ValueError as e:
        assert f"strategy {name!r} cannot be warm-started" in str(e) and "\n" not in str(e)
    drive(strategy, 10)
    assert isinstance(strategy.population_size(), int) and strategy.population_size() >= 0
    strategy.update(trial, Result(trial.trial_id, Outcome.COMPLETE, score=1.0, epoch=5))  # never raises


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
