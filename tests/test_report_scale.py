"""A long run's report draws at most MAX_POINTS marks per figure (a seeded sample, the best and every improvement
always among them; a worker timeline's first trials), says so in the figure's title, and draws a short run whole.
(A 100,000-trial run's page was 64 MB: 15-21 MB for each of the best-so-far, genealogy and timeline figures.)"""

from __future__ import annotations

import numpy as np
import pytest

import nas
from nas.monitor import figures
from nas.monitor.tables import objective_values
from nas.search_spaces.nb201 import NB201Space

N = 300


@pytest.fixture(scope="module")
def df(tmp_path_factory):
    run = tmp_path_factory.mktemp("scale") / "run"
    nas.search("nb201", "evolution", budget=N, executor="simulated", workers=4, seed=0, run_dir=run, progress=False,
               strategy_options={"population": 20, "sample_size": 5})
    return nas.load_results(run)


@pytest.fixture
def few(monkeypatch):
    monkeypatch.setattr(figures, "MAX_POINTS", 50)


def test_best_so_far_draws_a_sample_with_every_improvement_and_the_whole_line(df, few):
    values = objective_values(df, ["val_acc:max"]).val_acc
    fig = figures.best_so_far({"run": (df, values)}, "val_acc:max")
    trials, line = fig.data[0], fig.data[1]
    assert len(trials.x) == 50 and "(50 of 300 trials drawn: a seeded sample, every improvement among them)" in \
        fig.layout.title.text
    d = figures.timed(df).assign(value=values).sort_values("t_end")
    best = d.value.cummax()
    improvements = d.t_end[best.ne(best.shift())].tolist()
    assert set(improvements) <= set(trials.x) and set(improvements) <= set(line.x)
    assert max(line.y) == values.max() and list(line.y) == sorted(line.y) and line.x[-1] == d.t_end.max()


def test_genealogy_and_parallel_coordinates_draw_a_sample_holding_the_best(df, few):
    values = objective_values(df, ["val_acc:max"]).val_acc
    fig = figures.genealogy(df, values, "val_acc:max")
    marks = fig.data[1]
    assert len(marks.x) == 50 and int(df.trial_id[values.idxmax()]) in set(marks.x)
    assert "(50 of 300 trials drawn, the best 5 among them: a seeded sample)" in fig.layout.title.text
    decisions = figures.decisions_frame(df, NB201Space().parse)
    par = figures.parallel_coordinates(df, decisions, objective_values(df, ["val_acc:max"]), ["val_acc:max"])
    assert all(len(dim.values) == 50 for dim in par.data[0].dimensions) and "(50 of 300" in par.layout.title.text
    assert max(par.data[0].dimensions[-1].values) == values.max()


def test_the_timeline_draws_the_first_trials_and_the_population_age_line_is_thinned(df, few):
    fig = figures.worker_timeline(df)
    bars = sum(len(bar.x) for bar in fig.data)
    first = figures.timed(df).nsmallest(50, "t_start")
    assert bars == 50 and set(np.concatenate([bar.text for bar in fig.data])) == set(first.trial_id)
    assert "the first 50 of 300 trials, to" in fig.layout.title.text
    age = figures.population_age(df, 20)
    assert len(age.data[0].x) == 50 and len(age.data[1].x) <= 50
    ends = figures.timed(df).sort_values("t_end").query("state == 'COMPLETE'").t_end.to_numpy()
    expected = [float(np.mean(ends[i] - ends[max(0, i - 19):i + 1])) for i in range(len(ends))]
    every = -(-len(ends) // 50)
    assert np.allclose(age.data[1].y, expected[::every])


def test_a_sample_when_nearly_every_trial_improved_is_bounded_and_holds_the_best(monkeypatch):
    """(The kept rows were sampled too: the best's mark could be dropped, while the title said every improvement.)"""
    import pandas as pd

    d = pd.DataFrame({"v": range(100)})
    part, note = figures.drawn(d, keep=d.index[::-1], most=10)
    assert list(part.v) == list(range(90, 100)) and note == " (10 of 100 trials drawn: a seeded sample)"
    monkeypatch.setattr(figures, "MAX_POINTS", 10)
    runs = pd.DataFrame({"trial_id": range(100), "state": "COMPLETE", "arch": "a", "start_time": 0.0,
                         "end_time": [float(i) for i in range(100)]})
    fig = figures.best_so_far({"run": (runs, pd.Series(range(100), dtype=float))}, "val_acc:max")
    assert 99.0 in set(fig.data[0].y) and len(fig.data[0].y) == 10
    assert "(10 of 100 trials drawn: a seeded sample, the latest 10 of 100 improvements among them)" in \
        fig.layout.title.text


def test_a_run_under_the_bound_is_drawn_whole_and_says_nothing(df):
    values = objective_values(df, ["val_acc:max"]).val_acc
    fig = figures.best_so_far({"run": (df, values)}, "val_acc:max")
    assert len(fig.data[0].x) == N and fig.layout.title.text == "Best val_acc so far and every trial"
    assert sum(len(bar.x) for bar in figures.worker_timeline(df).data) == N
    assert "drawn" not in figures.genealogy(df, values, "val_acc:max").layout.title.text
