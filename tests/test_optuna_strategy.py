"""Optuna samplers as a strategy: the distribution mapping, failures, samplers, search quality (no Ray)."""

from __future__ import annotations

import pickle

import numpy as np
import optuna
import pytest
from conftest import toy_search
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState as OptunaState

from nas.core.registry import spaces
from nas.core.types import Outcome, Result
from nas.run.snapshot import read_snapshot, write_snapshot
from nas.search_spaces.toy import ToySpace, toy_score
from nas.strategies.optuna_sampler import SAMPLERS, OptunaStrategy
from nas.strategies.optuna_storage import CMA_ATTR, DataCmaEsSampler
from nas.strategies.random import RandomSearch


def complete(trial, score):
    return Result(trial.trial_id, Outcome.COMPLETE, score=score)


def run(strategy, budget):
    return toy_search(strategy, budget, in_flight=3)


def test_ordered_numeric_decisions_are_int_distributions_the_rest_categorical():
    s = OptunaStrategy(spaces.get("macro")(), seed=0)
    assert s.distributions["depth"] == IntDistribution(0, 2)
    assert s.distributions["dropout"] == IntDistribution(0, 2)
    assert s.distributions["activation"] == CategoricalDistribution([0, 1, 2])
    t = s.ask()
    params = s.study.trials[-1].params
    assert {k: s.space.decisions[k][params[k]] for k in params} == t.arch


def test_failed_results_are_failed_optuna_trials():
    s = OptunaStrategy(ToySpace(), seed=0)
    a, b = s.ask(), s.ask()
    s.tell(a, Result.failed(a.trial_id, "NaN loss"))
    s.tell(b, complete(b, -2.0))
    assert [t.state for t in s.study.trials] == [OptunaState.FAIL, OptunaState.COMPLETE]
    assert s.study.best_value == -2.0 and not s.pending


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_every_sampler_searches_and_resumes_from_its_state(sampler, tmp_path):
    s = OptunaStrategy(ToySpace(), sampler=sampler, startup=3, seed=1)
    pending = [s.ask() for _ in range(3)]
    for told in range(1, 6):  # five told with three in flight, asking until seven: two left in flight
        t = pending.pop(0)
        s.tell(t, complete(t, toy_score(t.arch)))
        if told + len(pending) < 7:
            pending.append(s.ask())
    write_snapshot(tmp_path / "s.json", s.state_dict())
    restored = OptunaStrategy(ToySpace(), sampler=sampler, startup=3, seed=99)
    restored.load_state_dict(read_snapshot(tmp_path / "s.json"))
    a, b = [s.ask() for _ in range(3)], [restored.ask() for _ in range(3)]
    assert [t.to_dict() for t in a] == [t.to_dict() for t in b]
    for t in a:
        s.tell(t, complete(t, toy_score(t.arch)))
    assert len(s.study.trials) == 10 and len(s.pending) == 2


def test_cmaes_refuses_a_space_without_ordered_decisions():
    with pytest.raises(ValueError, match="sampler 'cmaes' needs decisions with ordered numeric options"):
        OptunaStrategy(spaces.get("nb201")(), sampler="cmaes")


@pytest.mark.parametrize(("options", "message"), [
    ({"sampler": "nsga"}, "unknown sampler 'nsga'; allowed: tpe, random, cmaes, gp"),
    ({"startup": -1}, "startup must be an integer >= 0, got -1"),
])
def test_bad_options_are_named(options, message):
    with pytest.raises(ValueError, match=message):
        OptunaStrategy(ToySpace(), **options)


def test_tpe_beats_random_search():
    """10 fixed seeds, 60 trials each with 3 in flight (constant liar) in a 3,125-cell space."""
    tpe = [run(OptunaStrategy(ToySpace(), seed=s), 60) for s in range(10)]
    rnd = [run(RandomSearch(ToySpace(), seed=s), 60) for s in range(10)]
    assert np.mean(tpe) > np.mean(rnd) + 1.5
    assert sum(b == 0.0 for b in tpe) >= 5


def steps(strategy, pending, n, in_flight=3):
    """``n`` rounds of asking until ``in_flight`` are out, then telling the oldest; returns the asks."""
    asked = []
    for _ in range(n):
        while len(pending) < in_flight:
            asked.append(strategy.ask())
            pending.append(asked[-1])
        t = pending.pop(0)
        strategy.tell(t, complete(t, toy_score(t.arch)))
    return asked


@pytest.mark.parametrize("sampler", ["tpe", "gp"])
def test_a_journal_storage_keeps_the_snapshot_small_and_a_crash_after_it_resumes_exactly(sampler, tmp_path):
    """The study lives in Optuna's journal file; the snapshot holds only what is in flight, the sampler's
    random state and the journal's length. Asks and tells after the snapshot, then a crash: the restored
    strategy cuts the journal back and asks exactly what the original asked after the snapshot."""
    journal = tmp_path / "optuna.journal"
    s = OptunaStrategy(ToySpace(), sampler=sampler, startup=3, seed=1, storage=journal)
    pending: list = []
    steps(s, pending, 8)
    first = write_snapshot(tmp_path / "a.json", s.state_dict())
    steps(s, pending, 12)
    size = write_snapshot(tmp_path / "s.json", s.state_dict())
    assert size < 8000 and abs(size - first) < 100, (first, size)  # two MT19937 states: 5 KB
    at_snapshot, journal_bytes = list(pending), journal.stat().st_size
    after = steps(s, pending, 6)  # then the driver dies
    assert journal.stat().st_size > journal_bytes
    restored = OptunaStrategy(ToySpace(), sampler=sampler, startup=3, seed=99, storage=journal)
    restored.load_state_dict(read_snapshot(tmp_path / "s.json"))
    assert journal.stat().st_size == journal_bytes and len(restored.study.trials) == 20 + 2
    again = steps(restored, at_snapshot, 6)
    assert [t.to_dict() for t in again] == [t.to_dict() for t in after]


def test_a_journal_shorter_than_its_snapshot_or_of_another_kind_is_refused(tmp_path):
    journal = tmp_path / "optuna.journal"
    s = OptunaStrategy(ToySpace(), seed=1, storage=journal)
    steps(s, [], 3)
    write_snapshot(tmp_path / "s.json", s.state_dict())
    state = read_snapshot(tmp_path / "s.json")
    with pytest.raises(ValueError, match="in a journal storage, this strategy's storage is None"):
        OptunaStrategy(ToySpace(), seed=1).load_state_dict(state)
    with pytest.raises(ValueError, match="sampler 'tpe', this strategy uses 'random'"):
        OptunaStrategy(ToySpace(), seed=1, sampler="random", storage=journal).load_state_dict(state)
    other = tmp_path / "other.journal"
    OptunaStrategy(ToySpace(), seed=1, storage=other).ask()
    with pytest.raises(ValueError, match="fewer than the .* its snapshot recorded"):
        OptunaStrategy(ToySpace(), seed=1, storage=other).load_state_dict(state)


@pytest.mark.parametrize("text", [b"mine", b"mine\n", b'{"a": 1}', b'{"a": 1}\n', b"[]\n", b"{" * 10_000 + b"\n",
                                  b'{"op_code":0}\nnotes\n', b"\xff\xfe\n"])
def test_a_storage_file_that_is_not_an_optuna_journal_is_refused_unchanged(tmp_path, text):
    """Optuna appends its records to any file (after a last line without a newline, too) and fails later, or
    takes a JSON line of another kind for one of its records: a user's file named as the storage was changed."""
    path = tmp_path / "notes"
    path.write_bytes(text)
    with pytest.raises(ValueError, match=r"storage='.*notes' is not an Optuna journal \(line \d is not one of its"):
        OptunaStrategy(ToySpace(), seed=1, storage=path)
    assert path.read_bytes() == text
    with pytest.raises(ValueError, match=r"storage='.*' is a folder; give a file path"):
        OptunaStrategy(ToySpace(), seed=1, storage=tmp_path)


def test_a_journal_a_crash_cut_mid_record_is_still_its_storage(tmp_path):
    journal = tmp_path / "optuna.journal"
    steps(OptunaStrategy(ToySpace(), seed=1, storage=journal), [], 3)
    whole = journal.read_bytes()
    for cut in (1, 5, 40):
        journal.write_bytes(whole + whole.splitlines(keepends=True)[-1][:cut])
        OptunaStrategy(ToySpace(), seed=1, storage=journal)  # (a resume then cuts the journal back to its snapshot)


class WritesMarker:
    """Loading this pickle creates a file: proof that loading ran code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("safe", [True, False])
def test_cmaes_keeps_its_optimizer_as_data_and_never_loads_a_pickled_one(tmp_path, safe):
    """A study (journal or snapshot) crafted to hold a pickled CMA-ES optimizer, as Optuna's own
    CmaEsSampler writes one: our sampler never loads it; Optuna's would (the control proves the test can
    fail), which is why the strategy uses ours."""
    marker = tmp_path / "marker"
    dists = {"x": FloatDistribution(-3, 3), "y": FloatDistribution(-3, 3)}
    study = optuna.create_study()
    study.add_trial(optuna.trial.create_trial(
        params={"x": 0.0, "y": 0.0}, distributions=dists, value=1.0,
        system_attrs={"cma:optimizer:0": pickle.dumps(WritesMarker(marker)).hex(), "cma:generation": 0}))
    cls = DataCmaEsSampler if safe else optuna.samplers.CmaEsSampler
    study.sampler = cls(seed=0, n_startup_trials=0, popsize=4)
    if not safe:
        with pytest.raises(AttributeError):  # the unpickled "optimizer" was a file it had just created
            study.ask(dists)
        assert marker.exists()
        return
    for _ in range(6):
        t = study.ask(dists)
        study.tell(t, t.params["x"] ** 2 + t.params["y"] ** 2)
    assert not marker.exists()
    assert any(k.startswith(CMA_ATTR) for t in study.trials for k in t.system_attrs)
    assert not any(k.startswith("cma:optimizer") for t in study.trials[1:] for k in t.system_attrs)


def test_cmaes_resumes_exactly_from_an_in_memory_snapshot(tmp_path):
    s = OptunaStrategy(ToySpace(), sampler="cmaes", startup=3, seed=1)
    pending: list = []
    steps(s, pending, 30)
    write_snapshot(tmp_path / "s.json", s.state_dict())
    restored = OptunaStrategy(ToySpace(), sampler="cmaes", startup=3, seed=5)
    restored.load_state_dict(read_snapshot(tmp_path / "s.json"))
    a, b = steps(s, list(pending), 15), steps(restored, list(pending), 15)
    assert [t.to_dict() for t in a] == [t.to_dict() for t in b]
