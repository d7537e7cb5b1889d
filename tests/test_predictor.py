"""The predictor-guided strategy (BANANAS / NPENAS style) and its MLP ensemble: the encoding, the candidates (mutations
of the best, pending and evaluated ones excluded), the acquisitions, like-with-like fidelities, a bounded history
and a restored model (no Ray)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import toy_search

from nas.core.types import Outcome, Result
from nas.run.snapshot import read_snapshot, write_snapshot
from nas.search_spaces.toy import ToySpace, toy_score
from nas.strategies.ensemble import MLPEnsemble
from nas.strategies.predictor import PredictorGuided
from nas.strategies.random import RandomSearch, fingerprint


def done(trial, score, epoch=1):
    return Result(trial.trial_id, Outcome.COMPLETE, score=score, epoch=epoch)


def feed(p, n):
    asked = []
    for _ in range(n):
        t = p.ask()
        asked.append(t)
        p.tell(t, done(t, toy_score(t.arch)))
    return asked


def test_the_encoding_is_one_hot_per_decision():
    p = PredictorGuided(ToySpace(), seed=0)
    x = p._encode([{"d0": 0, "d1": 4, "d2": 2, "d3": 1, "d4": 3}])
    assert x.shape == (1, 25) and x.sum() == 5
    assert np.flatnonzero(x[0]).tolist() == [0, 9, 12, 16, 23]


def test_the_ensemble_fits_a_known_function_and_is_deterministic():
    rng = np.random.default_rng(0)
    x = np.eye(5)[rng.integers(5, size=(60,))]
    y = x @ np.arange(5.0)
    a = MLPEnsemble(seed=3).fit(x, y)
    mean, std = a.predict(np.eye(5))
    assert np.abs(mean - np.arange(5.0)).max() < 0.5 and std.shape == (5,)
    b = MLPEnsemble(seed=3).fit(x, y)
    assert np.array_equal(b.predict(np.eye(5))[0], mean)
    c = MLPEnsemble(seed=3).load_state_dict(a.state_dict())
    assert np.array_equal(c.predict(np.eye(5))[0], mean)


def test_after_init_every_ask_is_an_unevaluated_neighbour_of_a_best_result_not_in_flight():
    p = PredictorGuided(ToySpace(), seed=0, init=6, parents=3)
    first = feed(p, 6)
    assert all(t.parent is None for t in first)
    in_flight = [p.ask() for _ in range(5)]  # a batch out at once: no two alike
    keys = [fingerprint(t.arch) for t in in_flight]
    assert len(set(keys)) == 5 and not set(keys) & {fingerprint(t.arch) for t in first}
    best = sorted(first, key=lambda t: -toy_score(t.arch))[:3]
    for t in in_flight:
        assert min(sum(t.arch[k] != b.arch[k] for k in t.arch) for b in best) == 1
    assert p.fit_seconds > 0


@pytest.mark.parametrize("acquisition", ["its", "ucb", "mean"])
def test_each_acquisition_finds_better_toy_cells_than_random_search(acquisition):
    ours = [toy_search(PredictorGuided(ToySpace(), seed=s, acquisition=acquisition, init=8), 40) for s in range(3)]
    random = [toy_search(RandomSearch(ToySpace(), seed=s), 40) for s in range(3)]
    assert sum(ours) > sum(random) and max(ours) == 0.0


def test_it_fits_the_fidelity_most_results_have_and_takes_a_promotion_in():
    p = PredictorGuided(ToySpace(), seed=0, init=4)
    trials = [p.ask() for _ in range(4)]
    for i, t in enumerate(trials):
        p.tell(t, Result(t.trial_id, Outcome.PAUSED, score=0.5 + i / 10, epoch=12))
    p.update(trials[0], done(trials[0], 0.95, epoch=200))
    fidelity, archs, y = p._training_set()
    assert fidelity == 12 and len(archs) == 4 and sorted(y) == [0.5, 0.6, 0.7, 0.8]
    assert p.data[fingerprint(trials[0].arch)][1] == {12: 0.5, 200: 0.95}


def test_the_history_keeps_the_best_half_and_the_most_recent():
    p = PredictorGuided(ToySpace(), seed=0, init=200, history=10)
    asked = feed(p, 60)
    kept = {fingerprint(a) for a, _ in p.data.values()}
    assert len(kept) == 10
    scores = {fingerprint(t.arch): toy_score(t.arch) for t in asked}
    best5 = sorted(scores, key=lambda k: -scores[k])[:5]
    assert set(best5) <= kept or min(scores[k] for k in kept) >= sorted(scores.values())[-10]
    assert fingerprint(asked[-1].arch) in kept


def test_a_snapshot_holds_the_fitted_model_and_resumes_the_same_asks(tmp_path):
    p = PredictorGuided(ToySpace(), seed=0, init=5, refit=4)
    feed(p, 12)
    write_snapshot(tmp_path / "s.json", p.state_dict())
    back = PredictorGuided(ToySpace(), seed=9, init=5, refit=4)
    back.load_state_dict(read_snapshot(tmp_path / "s.json"))
    assert back.model is not None
    for _ in range(8):
        a, b = p.ask(), back.ask()
        assert a.to_dict() == b.to_dict()
        p.tell(a, done(a, toy_score(a.arch)))
        back.tell(b, done(b, toy_score(b.arch)))


@pytest.mark.parametrize("options, message", [({"acquisition": "ei"}, "acquisition must be one of its, ucb, mean"),
                                              ({"ensemble": 0}, "ensemble must be an integer >= 1"),
                                              ({"history": 1}, "history must be an integer >= 2")])
def test_bad_options_are_one_line_errors(options, message):
    with pytest.raises(ValueError, match=message):
        PredictorGuided(ToySpace(), **options)
