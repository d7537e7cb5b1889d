"""The simulated executor and the NAS-Bench-201 table: the clock, the worker bound, the protocol's
answers, and the loop, strategies and journal running on it unchanged."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

from nas.core.types import Outcome, Trial, TrialState
from nas.engine.interfaces import Callback
from nas.engine.loop import SearchLoop
from nas.engine.protocol import finished
from nas.engine.simulated import SimulatedExecutor, UnsupportedTrial
from nas.engine.tabular.nb201_table import DATASETS, NB201Benchmark, data_path, load_table
from nas.run.store import RunStore
from nas.search_spaces.nb201 import NB201Space, from_op_code
from nas.strategies.evolution import RegularizedEvolution
from nas.strategies.random import RandomSearch


@pytest.fixture(scope="module")
def space():
    return NB201Space()


@pytest.fixture(scope="module")
def bench():
    return NB201Benchmark("cifar10")


class Clock(Callback):
    """Records the loop's clock (its elapsed time: the simulated clock from 0) at every submission and result."""

    def __init__(self):
        self.times, self.ends = [], []

    def on_submit(self, status, trial):
        self.times.append(status.elapsed)

    def on_result(self, status, trial, result):
        self.times.append(status.elapsed)
        self.ends.append(result.end_time)


def test_table_matches_its_readme_and_the_space(space):
    table = load_table()
    assert len(table) == 15_625 and data_path().is_file()
    assert table.best("cifar10") == (6111, pytest.approx(91.61, abs=0.005))
    assert table.best("cifar100") == (9930, pytest.approx(73.49, abs=0.005))
    assert table.best("imagenet16") == (10676, pytest.approx(46.73, abs=0.005))
    all_skip = table.row(from_op_code("111111"))
    assert table.valid200["cifar10"][all_skip] == pytest.approx(39.77, abs=0.005)
    for code, row in list(table.index_of.items())[::997]:  # op code, arch string and row agree
        assert table.arch_str[row] == space.format(from_op_code(code))
        assert table.row(space.parse(table.arch_str[row])) == row
    assert load_table() is table  # read once per process


def test_query_follows_the_protocol(bench, space):
    arch = from_op_code("334131")  # row 1 of the csv
    reward, seconds, metrics = bench.query(arch)
    assert reward == pytest.approx(0.82834)  # 12-epoch validation, as a fraction
    assert seconds == pytest.approx(0.06 * 2169.641)  # 12 of 200 epochs of training time
    assert metrics["index"] == 1
    assert metrics["valid_acc_200"] == pytest.approx((90.712 + 90.716 + 90.880) / 3)  # mean over seeds
    assert set(f"valid_acc_200_{d}" for d in DATASETS) <= set(metrics)
    with pytest.raises(ValueError, match="unknown dataset 'cifar1000'; known: cifar10, cifar100, imagenet16"):
        NB201Benchmark("cifar1000")


@pytest.mark.parametrize("workers", [1, 3, 8])
def test_clock_never_runs_backwards_and_workers_are_never_exceeded(space, bench, workers):
    ex = SimulatedExecutor(space, bench, workers=workers)
    clock = Clock()
    loop = SearchLoop(RegularizedEvolution(space, population=10, sample_size=3, seed=1), ex,
                      time_budget=6_000, callbacks=[clock])
    results = loop.run()
    assert np.all(np.diff(clock.times) >= 0)
    assert clock.ends == sorted(clock.ends)  # delivered in order of finish
    assert ex.max_in_flight == workers
    events = sorted([(r.start_time, 1) for _, r in results] + [(r.end_time, -1) for _, r in results],
                    key=lambda e: (e[0], e[1]))  # at equal times a finish frees its worker first
    assert max(np.cumsum([d for _, d in events])) <= workers
    for w in {r.worker for _, r in results}:  # one trial at a time per worker
        spans = sorted((r.start_time, r.end_time) for _, r in results if r.worker == w)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    assert all(r.end_time <= 6_000 for _, r in results)  # (one that ended past the budget is not counted)
    assert loop.elapsed >= 6_000 and ex.now() == loop.clock()
    assert sum(r.end_time - r.start_time for _, r in results) <= ex.work  # (the executor also ran the uncounted)
    assert loop.summary()["utilization"] <= 1.0


def test_many_workers_run_a_long_search_with_the_journal(space, bench, tmp_path):
    ex = SimulatedExecutor(space, bench, workers=32)
    store = RunStore.create(tmp_path, {"space": "nb201", "strategy": "random"})
    try:
        loop = SearchLoop(RandomSearch(space, seed=0), ex, time_budget=3_000, store=store)
        results = loop.run()
    finally:
        store.close()
    lines = [ln for ln in (tmp_path / "trials.jsonl").read_text().splitlines() if '"kind":"result"' in ln]
    assert len(lines) == len(results) > 32 * 3_000 / 210
    first = json.loads(lines[0])["result"]
    assert first["outcome"] == "COMPLETE" and first["worker"].startswith("sim-")
    assert 0.0 <= loop.summary()["utilization"] <= 1.0


def test_same_seeds_same_search(space, bench):
    def run():
        ex = SimulatedExecutor(space, bench, workers=4, seed=3, noise=0.5)
        loop = SearchLoop(RegularizedEvolution(space, population=10, sample_size=3, seed=3), ex, budget=80)
        return [(t.arch, r.score, r.end_time) for t, r in loop.run()]

    assert run() == run()


def test_noise_is_seeded_and_off_by_default(space, bench):
    arch = from_op_code("334131")
    scores = {}
    for noise in (0.0, 0.01):
        ex = SimulatedExecutor(space, bench, seed=0, noise=noise)
        ex.submit(Trial(0, arch))
        scores[noise] = finished(ex.poll())[0][1].score
    assert scores[0.0] == pytest.approx(0.82834)
    assert scores[0.01] != scores[0.0] and abs(scores[0.01] - scores[0.0]) < 0.05


@pytest.mark.parametrize("fields", [{"hparams": {"lr": 0.1}}, {"checkpoint_from": 0}, {"epochs": 200}])
def test_trials_the_table_cannot_answer_are_refused(space, bench, fields):
    ex = SimulatedExecutor(space, bench)
    with pytest.raises(UnsupportedTrial, match="asks for .*; the tabular benchmark answers only 12-epoch training"):
        ex.submit(Trial(0, from_op_code("334131"), **fields))
    ex.submit(Trial(1, from_op_code("334131"), epochs=12))  # the table's own schedule is fine
    assert ex.free_slots() == 0
    with pytest.raises(RuntimeError, match="no free slot"):
        ex.submit(Trial(2, from_op_code("334131")))


def test_an_arch_outside_the_table_fails_at_no_cost(space, bench):
    ex = SimulatedExecutor(space, bench)
    ex.submit(Trial(0, {"edge_1_0": "conv_7x7"}))
    [(_, result)] = finished(ex.poll())
    assert result.state is TrialState.FAILED and "InvalidArchitecture" in result.error
    assert ex.now() == 0.0


def test_a_cancelled_trial_ends_without_a_result_and_frees_its_worker(space, bench):
    ex = SimulatedExecutor(space, bench, workers=2)
    ex.submit(Trial(0, from_op_code("334131")))
    ex.submit(Trial(1, from_op_code("000000")))
    ex.stop(1, Outcome.CANCELLED)
    assert ex.free_slots() == 1
    [(trial, result)] = finished(ex.poll())
    assert trial.trial_id == 1 and result.outcome is Outcome.CANCELLED and not result.ok and result.end_time == 0.0
    [(trial, result)] = finished(ex.poll())
    assert trial.trial_id == 0 and result.ok and ex.now() == pytest.approx(130.17846)
    assert ex.poll() == []


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_bad_worker_counts_are_refused(space, bench, bad):
    with pytest.raises(ValueError, match="workers must be an integer >= 1"):
        SimulatedExecutor(space, bench, workers=bad)
    with pytest.raises(ValueError, match="noise must be >= 0"):
        SimulatedExecutor(space, bench, noise=-0.1)


def test_constraints_make_candidates_over_a_limit_infeasible(tmp_path):
    """(The simulated executor ignored --max-params and --max-latency-ms: 37 of 40 trials over a limit were COMPLETE,
    counted best and put on the front.) Each limit is checked on the costs the table reports, as a worker checks
    what it measured: over one, an INFEASIBLE failure at no cost, with the costs; the best and the front stay within."""
    import nas
    from nas.train.settings import TrainSettings

    settings = TrainSettings(max_params=300_000, max_latency_ms=12, objectives=("val_acc", "params:min"))
    df = nas.search("nb201", "random", budget=40, executor="simulated", workers=4, seed=0, settings=settings,
                    run_dir=tmp_path / "run")
    costs = pd.DataFrame(df["metrics"].tolist())
    over = (costs["params"] > 300_000) | (costs["latency_ms"] > 12)
    assert over.sum() > 10 and (df[over]["failure"] == "INFEASIBLE").all() and (df[over]["state"] == "FAILED").all()
    assert (df[over]["end_time"] == df[over]["start_time"]).all()  # (nothing charged)
    assert (df[~over]["state"] == "COMPLETE").all() and not df[over]["error"].str.contains("Traceback").any()
    front = set(df.attrs["front"]["trial_id"])
    assert front and front <= set(df[~over]["trial_id"])


@pytest.mark.parametrize(("settings", "said"), [
    ({"max_flops": 3e6}, "the simulated executor's table reports no flops (max_flops): the limit cannot be checked"),
    ({"proxy_screen": "synflow:3"}, "the simulated executor scores no zero-cost proxy (proxy_screen 'synflow:3')"),
])
def test_a_constraint_the_table_cannot_check_is_refused_before_anything_is_made(tmp_path, settings, said):
    import nas
    from nas.train.settings import TrainSettings

    with pytest.raises(ValueError, match=re.escape(said)):
        nas.search("nb201", "random", budget=4, executor="simulated", settings=TrainSettings(**settings),
                   run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_simulated_search_reads_no_dataset(tmp_path):
    """(Each simulated search and resume loaded digits through scikit-learn, 1-6 s, for trials its table answers.)
    A new one records none; one made before, which recorded its dataset, resumes as it was made."""
    import nas

    nas.search("nb201", "random", budget=3, executor="simulated", seed=0, run_dir=tmp_path / "run", progress=False)
    assert json.loads((tmp_path / "run" / "run.json").read_text())["train"]["dataset"] is None
    old = json.loads((tmp_path / "run" / "run.json").read_text())
    old["train"].update(dataset="digits", dataset_fingerprint=nas.train.data.dataset_fingerprint(
        nas.load_dataset("digits", seed=0)))
    (tmp_path / "run" / "run.json").write_text(json.dumps(old))
    assert len(nas.search("nb201", "random", budget=5, executor="simulated", seed=0, data="digits",
                          run_dir=tmp_path / "run", resume=True, progress=False)) == 5


def test_a_trial_that_ends_past_the_time_budget_is_not_counted(space, bench):
    """(A trial that ended at 3,011 s counted in a 3,000 s budget: a simulated poll jumps to its next event.)"""
    ex = SimulatedExecutor(space, bench, workers=4)
    loop = SearchLoop(RandomSearch(space, seed=0), ex, time_budget=3000)
    results = loop.run()
    assert results and max(r.end_time for _, r in results) <= 3000 < ex.now()
    assert loop.book.in_flight > 0  # (those running at the end: unfinished, as the help says)
