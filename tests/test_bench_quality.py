"""Small versions of the search-quality benchmarks (issue 22): the Table 5 protocol beside the per-dataset one, a
proxy warm-up answered from the proxy cache and charged to the budget, evaluations to the optimum, and the proxies'
rank correlations (never how fast)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from nas.cli import main
from nas.engine.tabular.nb201_table import load_table
from nas_benchmarks.nb201_optimum import optimum_cells, run_until
from nas_benchmarks.nb201_strategies import run_search


def test_table5_judges_one_search_on_cifar10_on_every_dataset(tmp_path, capsys):
    code = main(["bench", "strategies", "--protocol", "table5", "--strategies", "local,evolution", "--seeds", "2",
                 "--time-budget", "3000", "--jobs", "1", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0 and "Table 5 protocol: search on cifar10" in out
    assert "paper REA" in out and "71.81 +- 1.12" in out and "45.15 +- 0.89" in out  # the paper's other datasets
    rows = pd.read_csv(tmp_path / "strategies-table5.csv")
    table = load_table()
    for r in rows.itertuples():
        assert r.valid200 == pytest.approx(table.valid200["cifar10"][r.best_index], abs=1e-3)
        assert 1 <= r.evals_to_pick <= r.trials
    local = run_search("local", 0, time_budget=3000)
    assert local.valid200_all["cifar100"] == pytest.approx(table.valid200["cifar100"][local.best_index])


def test_the_per_dataset_protocol_is_the_default_and_says_so(tmp_path, capsys):
    code = main(["bench", "strategies", "--dataset", "cifar100", "--strategies", "random", "--seeds", "1",
                 "--time-budget", "3000", "--jobs", "1", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0 and "per-dataset protocol (search on cifar100" in out and "REA" not in out
    assert main(["bench", "strategies", "--protocol", "table5", "--dataset", "cifar100", "--out", str(tmp_path)]) == 2
    assert "--protocol table5 searches on cifar10" in capsys.readouterr().err


def fake_cache(path, values, seconds=0.5):
    pd.DataFrame({"index": np.arange(len(values)), "synflow": values, "sec_synflow": seconds}).to_csv(path, index=False)


def test_a_warm_up_starts_from_the_proxys_best_and_its_cost_comes_off_the_budget(tmp_path):
    table = load_table()
    cache = tmp_path / "proxies.csv"
    fake_cache(cache, table.valid12["cifar10"])  # a perfect proxy: the reward itself
    cold = run_search("local", 0, time_budget=3000)
    warm = run_search("local", 0, time_budget=3000, options={"warmup": "synflow:400:4", "init": 4},
                      proxy_cache=str(cache))
    assert warm.warmup_seconds == pytest.approx(400 * 0.5)
    assert warm.curve[0][0] > warm.warmup_seconds and warm.reward > cold.reward
    with pytest.raises(ValueError, match="no proxy cache at"):
        run_search("local", 0, options={"warmup": "synflow:40:4"}, proxy_cache=str(tmp_path / "none.csv"))


def test_evaluations_to_the_optimum_stop_at_it():
    best = optimum_cells("cifar100", 200)
    assert best == {int(np.argmax(load_table().valid200["cifar100"]))}
    out = run_until("local", 1, dataset="cifar100", epochs=200, max_evals=2000)
    assert out.reached and out.trials == out.evals  # the run stopped there
    capped = run_until("random", 0, dataset="cifar100", epochs=200, max_evals=30)
    assert not capped.reached and capped.evals == 30


def test_cli_optimum_prints_reached_runs(capsys):
    code = main(["bench", "optimum", "--strategies", "local", "--seeds", "2", "--max-evals", "2000", "--jobs", "1"])
    out = capsys.readouterr().out
    assert code == 0 and "local search ~127 (White et al. 2021)" in out and "2/2" in out


def test_cli_proxies_ranks_a_small_sample_and_caches_it(tmp_path, capsys):
    argv = ["bench", "proxies", "--sample", "12", "--channels", "4", "--batch", "8", "--jobs", "1", "--out",
            str(tmp_path), "--json", str(tmp_path / "p.json")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    for name in ("synflow", "snip", "grad_norm", "jacob_cov", "naswot", "params", "vote"):
        assert f"\n{name} " in out
    cache = tmp_path / "nb201-proxies-c4-n1-b8.csv"
    frame = pd.read_csv(cache)
    assert len(frame) == 12 and (frame["sec_synflow"] > 0).all()
    import json

    corr = json.loads((tmp_path / "p.json").read_text())["correlations"]
    assert all(-1 <= v[0] <= 1 and -1 <= v[1] <= 1 for by in corr.values() for v in by.values())
    before = cache.stat().st_mtime_ns
    assert main(argv) == 0 and cache.stat().st_mtime_ns == before  # all cached: nothing recomputed
    assert main(["bench", "proxies", "--sample", "1", "--out", str(tmp_path)]) == 2
    assert "--sample must be 2..15625 or 'all'" in capsys.readouterr().err
