"""Small versions of the benchmarks: they run end to end and their figures are right (never how fast)."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from nas.cli import main
from nas.engine.tabular.nb201_table import load_table
from nas_benchmarks.harness import PROTOCOL_OPTIONS, parse_strategy_options, run_seeds, values_at
from nas_benchmarks.nb201_strategies import SearchOutcome, format_table, run_search, summary_rows
from nas_benchmarks.scaling import scaling_rows, target_for


@pytest.fixture(scope="module")
def random_and_evolution():
    return run_seeds(run_search, ["random", "evolution"], range(30), options=PROTOCOL_OPTIONS)


def test_evolution_beats_random_on_average_over_fixed_seeds(random_and_evolution):
    by = {s: [o for o in random_and_evolution if o.method == s] for s in ("random", "evolution")}
    assert np.mean([o.reward for o in by["evolution"]]) > np.mean([o.reward for o in by["random"]])
    assert np.mean([o.valid200 for o in by["evolution"]]) > np.mean([o.valid200 for o in by["random"]])


def test_a_run_reports_the_200_epoch_accuracy_of_its_best_reward(random_and_evolution):
    table = load_table()
    for o in random_and_evolution:
        assert o.trials > 50 and o.best_arch == table.arch_str[o.best_index]
        assert o.valid200 == pytest.approx(table.valid200["cifar10"][o.best_index])
        assert o.reward == pytest.approx(table.valid12["cifar10"][o.best_index])
        times = [t for t, _ in o.curve]
        assert times == sorted(times) and 0 < times[-1] <= 12_000  # nothing past the budget counts
        assert o.curve[-1][1] == pytest.approx(o.valid200)


def test_reported_dataset_judges_the_cell_searched_on_cifar10():
    c10 = run_search("evolution", 0, options=PROTOCOL_OPTIONS["evolution"])
    c100 = run_search("evolution", 0, dataset="cifar100", options=PROTOCOL_OPTIONS["evolution"])
    assert c100.best_index == c10.best_index  # the same search: only the judge changes
    assert c100.valid200 == pytest.approx(load_table().valid200["cifar100"][c10.best_index])


def test_summary_table_puts_the_published_figures_beside_ours(random_and_evolution):
    na = SearchOutcome("pbt", 0, not_applicable="trial 3 asks for checkpoint_from=1; the tabular benchmark answers ...")
    rows = summary_rows([*random_and_evolution, na], "cifar10", "cifar10")
    text = format_table(rows)
    assert "REA 91.19 +- 0.31" in text and "RS 90.93 +- 0.36" in text and "BOHB 90.82 +- 0.53" in text
    assert "n/a: trial 3 asks for checkpoint_from=1; the tabular benchmark answers ..." in text
    evo = next(r for r in rows if r["strategy"] == "evolution")
    assert evo["runs"] == 30 and 89 < evo["mean"] < 91.62 and evo["std"] > 0
    assert next(r for r in rows if r["strategy"] == "optimum")["mean"] == pytest.approx(91.6067, abs=1e-3)
    assert "REA" not in format_table(summary_rows(random_and_evolution, "cifar10", "cifar100"))  # not comparable


def test_curves_on_a_grid_are_step_functions():
    o = SearchOutcome("x", 0, curve=[(100.0, 80.0), (300.0, 90.0)])
    values = values_at([o], np.array([0.0, 100.0, 200.0, 300.0, 1000.0]))
    assert np.isnan(values[0, 0]) and values[0, 1:].tolist() == [80.0, 80.0, 90.0, 90.0]


def test_strategy_options_parse_over_the_protocol_defaults():
    opts = parse_strategy_options(["evolution.population=20", "rl.lr=0.01"], PROTOCOL_OPTIONS)
    assert opts["evolution"] == {"population": 20, "sample_size": 3} and opts["rl"] == {"lr": 0.01}
    with pytest.raises(ValueError, match="is not STRATEGY.KEY=VALUE"):
        parse_strategy_options(["population=20"])


def test_results_do_not_depend_on_the_number_of_processes():
    one = run_seeds(run_search, ["random", "evolution"], [0, 1], time_budget=3_000, options=PROTOCOL_OPTIONS)
    two = run_seeds(run_search, ["random", "evolution"], [0, 1], time_budget=3_000, options=PROTOCOL_OPTIONS, jobs=2)
    assert [(o.method, o.seed, o.best_index, o.trials) for o in one] == \
           [(o.method, o.seed, o.best_index, o.trials) for o in two]


def test_cli_strategies_writes_csv_and_png(tmp_path, capsys):
    code = main(["bench", "strategies", "--strategies", "random,evolution", "--seeds", "3", "--jobs", "1",
                 "--time-budget", "4000", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0 and "REA 91.19 +- 0.31" in out and "6 runs in" in out
    rows = list(csv.DictReader((tmp_path / "strategies-cifar10.csv").open()))
    assert len(rows) == 6 and {r["strategy"] for r in rows} == {"random", "evolution"}
    png = (tmp_path / "strategies-cifar10.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


@pytest.mark.parametrize("argv, message", [
    (["--strategies", "evolutoin"], "unknown strategy 'evolutoin' (did you mean 'evolution'?); known:"),
    (["--seeds", "0"], "--seeds must be >= 1"),
    (["--seeds", "0", "--quick"], "--seeds must be >= 1"),  # (--quick's 3 seeds took over a bad value unsaid)
    (["--time-budget", "inf"], "--time-budget must be a finite number of simulated seconds > 0, got inf"),
    (["-o", "evolution.population=0"], "population must be an integer >= 1"),
])
def test_cli_strategies_bad_input_is_one_line(tmp_path, capsys, argv, message):
    code = main(["bench", "strategies", "--jobs", "1", "--out", str(tmp_path), "--seeds", "1", *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_scaling_work_depth_and_parallelism():
    target = target_for(0.01, "cifar10")
    rows = scaling_rows("evolution", [1, 4, 16], seeds=[0, 1], trials=300, target=target,
                        options=PROTOCOL_OPTIONS["evolution"])
    assert [r["workers"] for r in rows] == [1, 4, 16]
    assert rows[0]["parallelism"] == pytest.approx(1.0) and rows[0]["speedup"] == pytest.approx(1.0)
    for r in rows:
        assert r["reached"] == 2 and r["parallelism"] <= r["workers"] + 1e-9
        assert r["depth"] >= r["work"] / r["workers"] - 1e-6 and r["strategy_us_per_trial"] > 0
    assert rows[0]["depth"] > rows[1]["depth"] > rows[2]["depth"]


def test_cli_scaling_writes_its_table(tmp_path, capsys):
    code = main(["bench", "scaling", "--workers", "1,8", "--seeds", "2", "--trials", "200", "--target-top", "0.05",
                 "--jobs", "1", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0 and "parallelism" in out and (tmp_path / "scaling-evolution.csv").is_file()
    assert main(["bench", "scaling", "--target-top", "2", "--out", str(tmp_path)]) == 2


@pytest.mark.ray
def test_overhead_of_our_executor_on_trivial_trials(ray_local):
    from nas_benchmarks.overhead import derive, ours

    row = derive(ours(20, 0.0, 2))
    assert row["complete"] == 20 and row["wall"] > 0
    assert 0 < row["loop_utilization"] <= 1


def test_cli_driver_runs_tiny_and_resumes_after_a_sigkill(tmp_path, capsys):
    code = main(["bench", "driver", "--workers", "10,20", "--trials-per-worker", "3", "--snapshot-every", "7",
                 "--dir", str(tmp_path), "--heap"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "W=10: 30 trials, resume loaded 30" in out and "W=20: 60 trials, resume loaded 60" in out
    assert "fsync ms" in out and "x W=10" in out and "snapshot KB" in out and "heap B/trial" in out
    assert main(["bench", "driver", "--workers", "ten"]) == 2


@pytest.mark.ray
def test_ray_poll_runs_ours_the_floor_and_the_baseline_side_by_side(ray_local):
    from nas_benchmarks.ray_poll import format_rows, run

    rows = run(40, [2], 0.05, floor_too=True, repeats=3)
    assert [r["side"] for r in rows] == ["ours", "Ray's floor", "ray.wait over all"]
    assert all(r["trials"] == 40 and r["in_flight"] == 4 and r["poll_cpu"] > 0 for r in rows)  # 2 workers x 2
    for r in rows:  # each row is its side's median run of the three
        assert len(r["cpu_runs"]) == 3 and (r["poll_cpu"] + r["submit_cpu"]) / 40 == r["cpu_runs"][1]
    lines = {line.split("  ")[0]: line.split() for line in format_rows(rows).splitlines()[2:]}
    ratios = [cell for cell in lines["ours"] if cell.endswith("x")]
    assert len(ratios) == 3  # over the baseline, over the floor, over its own first row
    assert len([cell for cell in lines["Ray's floor"] if cell.endswith("x")]) == 2  # (no floor over itself)


@pytest.mark.parametrize("argv, message", [
    (["scaling", "--jobs", "-1"], "workers, --seeds, --trials and --jobs must be >= 1, got [1, 4, 16, 64, 256], "),
    (["overhead", "--sleep-ms", "nan"], "--trials must be two counts 1 <= small < large, --workers >= 1 and sleeps "
                                        "finite >= 0, got 100,500, 2, nan"),
    (["asha-train", "--eta", "-1"], "need --eta a finite number > 1 and --grace-period in 1..--epochs"),
    (["asha-train", "--grace-period", "0"], "need --eta a finite number > 1 and --grace-period in 1..--epochs"),
    (["gang", "--gpus-per-rank", "nan"], "--gpus-per-rank must be a finite number >= 0, got nan"),
    (["driver", "--dir", "{file}"], "--dir must be an existing folder, got "),
    # checked as given, before --quick's own values take over (they took over a bad value unsaid):
    (["inherit-search", "--budget", "-1", "--quick"], "--budget must be >= 1, got -1"),
    (["mo-train", "--epochs", "0", "--quick"], "--epochs must be >= 1, got 0"),
    (["supernet", "--standalone-epochs", "-1", "--quick"], "--standalone-epochs must be >= 1, got -1"),
    (["warm-start", "--first", "0", "--quick"], "--first must be >= 1, got 0"),
    (["inherit", "--children", "0", "--quick"], "--children must be >= 1, got 0"),
])
def test_bad_benchmark_values_are_one_line_before_anything_runs(tmp_path, capsys, argv, message):
    (tmp_path / "file").write_text("not a folder")
    code = main(["bench", *(a.format(file=tmp_path / "file") for a in argv)])
    err = capsys.readouterr().err
    assert code == 2 and f"nas bench: error: {message}" in err and len(err.strip().splitlines()) == 1, err
