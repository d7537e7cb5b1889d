"""The multi-objective benchmarks: the simulated NAS-Bench-201 one (fronts and hypervolumes against the table's
enumerated front) and the real-training one (a --quick run end to end); their bad input is one line."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from nas.cli import main
from nas.core import objectives as core
from nas.core.front import hypervolume
from nas_benchmarks.harness import simulated_search
from nas_benchmarks.nb201_mo import METHODS, cell_scores, optimum, reference, run_mo

LATENCY = ("val_acc:max", "latency_ms:min")
PARAMS = ("val_acc:max", "params:min")


def test_true_front_is_the_enumerated_non_dominated_set():
    judged = cell_scores("cifar10", "cifar10", LATENCY, True)
    assert judged.shape == (15_625, 2) and (judged[:, 1] < 0).all()  # latency minimised: negated
    opt = optimum("cifar10", "cifar10", LATENCY)
    front = judged[core.nondominated(judged)]
    assert opt["size"] == len(front) > 5
    # brute force: no cell dominates a front member
    for p in front:
        assert not ((judged >= p).all(axis=1) & (judged > p).any(axis=1)).any()
    # the best-accuracy cell and the fastest cell are on it, the proxy's front judged on 200 epochs is below
    assert judged[:, 0].max() == front[:, 0].max() and judged[:, 1].max() == front[:, 1].max()
    assert opt["proxy_hv"] < opt["hv"]
    assert opt["hv"] == pytest.approx(hypervolume(front * [1, -1], reference("cifar10", "cifar10", LATENCY) * np.array(
        [1, -1]), list(LATENCY)))


@pytest.mark.parametrize("method", list(METHODS))
def test_each_method_finds_a_front_within_the_budget(method):
    out = run_mo(method, 3, LATENCY, time_budget=2500)
    seen = cell_scores("cifar10", "cifar10", LATENCY, False)
    assert out.trials > 5 and len(out.front) >= 2
    assert core.nondominated(seen[out.front]).all()  # mutually non-dominated on what the search saw
    assert 0 < out.hv_pct <= 100 and out.curve[-1] == (out.curve[-1][0], out.hv_pct)
    assert all(t <= 2500 for t, _ in out.curve) and [t for t, _ in out.curve] == sorted(t for t, _ in out.curve)


def test_same_seed_same_front_and_objectives_change_it():
    a, b = run_mo("evolution", 1, LATENCY, time_budget=2500), run_mo("evolution", 1, LATENCY, time_budget=2500)
    assert a.front == b.front and a.curve == b.curve
    c = run_mo("evolution", 1, PARAMS, time_budget=2500)
    assert c.front != a.front


def test_strategies_are_told_every_objective():
    loop, _ = simulated_search("evolution", "nb201-cifar10", seed=0, options={"population": 5, "sample_size": 2},
                               objectives=LATENCY, budget=8)
    _, result = loop.results()[0]
    assert result.scores == [result.metrics["val_acc"], -result.metrics["latency_ms"]]
    told = loop.strategy.population[0].scores
    assert told is not None and len(told) == 2 and told[1] < 0  # latency minimised -> negated


def test_cli_mo_strategies_writes_table_csv_and_png(tmp_path, capsys):
    code = main(["bench", "strategies", "--quick", "--objective", "val_acc:max", "--objective", "params:min",
                 "--strategies", "random,nsga2", "--jobs", "1", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0 and "6 runs in" in out
    assert "HV% @ 3000 s" in out and "optimum" in out and "100.00" in out and "12-epoch front" in out
    rows = list(csv.DictReader((tmp_path / "mo-val_acc-params-cifar10.csv").open()))
    assert len(rows) == 6 and {r["method"] for r in rows} == {"random", "nsga2"}
    assert all(0 < float(r["hv_pct"]) <= 100 for r in rows)
    png = (tmp_path / "mo-val_acc-params-cifar10.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


@pytest.mark.parametrize("argv, message", [
    (["--objective", "val_acc:max"], "needs two or more --objective"),
    (["--objective", "val_acc", "--objective", "flops:min"], "'flops' is not in the NAS-Bench-201 table"),
    (["--objective", "val_acc", "--objective", "params:low"], "must be max or min, got 'low'"),
    (["--objective", "val_acc", "--objective", "val_acc:min"], "'val_acc' is given twice"),
    (["--objective", "val_acc", "--objective", "params:min", "--noise", "0.5"], "--noise 0.5 is not supported"),
    (["--objective", "val_acc", "--objective", "params:min", "--strategies", "pbt"], "unknown method 'pbt'"),
    (["--objective", "val_acc", "--objective", "params:min", "-o", "rea.population=3"], "'rea' is not a method"),
])
def test_cli_mo_strategies_bad_input_is_one_line(tmp_path, capsys, argv, message):
    code = main(["bench", "strategies", "--jobs", "1", "--out", str(tmp_path), "--seeds", "1", *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_cli_mo_train_quick_draws_the_fronts(tmp_path, capsys):
    png = tmp_path / "fronts.png"
    code = main(["bench", "mo-train", "--quick", "--methods", "random,nsga2", "--out", str(png)])
    out = capsys.readouterr().out
    assert code == 0
    summary_table, fronts = out.split("\n\n")[:2]
    summary = {ln.split()[0]: ln.split() for ln in summary_table.splitlines() if ln.split()[0] in ("random", "nsga2")}
    assert set(summary) == {"random", "nsga2"}
    assert all(row[1] == "3" for row in summary.values())  # 3 trials each
    assert {ln.split()[0] for ln in fronts.splitlines()[2:]} == {"random", "nsga2"}  # each front's members
    assert "the same architecture measured in several trials" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("argv, message", [
    (["--cost-repeats", "0"], "--cost-repeats must be >= 1, got 0"),
    (["--methods", "tpe"], "unknown method 'tpe'; known: evolution, nsga2, random, parego-rl"),
    (["--budget", "0"], "--budget must be >= 1, got 0"),
])
def test_cli_mo_train_bad_input_is_one_line(tmp_path, capsys, argv, message):
    code = main(["bench", "mo-train", "--out", str(tmp_path / "x.png"), *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
