"""``nas bench strategies``: every registered strategy on NAS-Bench-201, side by side with the paper.

The search of NAS-Bench-201 (Dong & Yang, ICLR 2020): the 12-epoch validation accuracy is the reward, within
12,000 simulated seconds (each query costs its 12-epoch training time; the paper's extra validation epoch is
not charged, see the table's README), one worker; the best cell found (best reward) is judged by its 200-epoch
validation accuracy, the mean over the table's seeds. Two protocols (``--protocol``):

- ``per-dataset`` (the default): search on ``--dataset`` and judge on it (``--search-dataset`` may differ). Only
  its CIFAR-10 row is like for like with the paper's Table 5, which searched on CIFAR-10 alone; the paper's rows
  are shown only there.
- ``table5``: the paper's Table 5 exactly: search on CIFAR-10, then judge the one cell each run found on all
  three datasets, beside the paper's rows (validation accuracy, mean +- std over its 500 runs; ``--seeds 500``
  runs as many) (:mod:`.nb201_table5`).

Both print the mean evaluations until each run first evaluated the cell it ends with ("evals to pick"), the
strategy's milliseconds per trial (ask and tell), and apart from them those spent fitting a model (the predictor).
A strategy option ``warmup=PROXY:M:K`` (``-o local.warmup=synflow:3000:64``) is answered from the proxy cache of
``nas bench proxies`` (``--proxy-cache``), and its cost, M x the cache's measured seconds per cell on this CPU,
comes off the run's simulated time budget.

Each (strategy, seed) is one :func:`nas_benchmarks.harness.simulated_search` (the real loop on the simulated
executor, without a journal); ``--objective`` runs the multi-objective version instead (:mod:`.nb201_mo`). A
strategy whose trials the table cannot answer (PBT: checkpoints, hyperparameters) is listed as not applicable,
with the reason.

>>> out = run_search("evolution", 0, time_budget=3000, options={"population": 10, "sample_size": 3})
>>> out.trials > 20, 80 < out.valid200 < 92, out.curve[0][0] > 0
(True, True, True)
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nas.run.export import make_export_dir

from . import add_experiment
from .harness import (
    PROTOCOL_OPTIONS,
    QUICK_WINS,
    Outcome,
    add_simulation_arguments,
    check_noise,
    check_runs,
    check_strategy_options,
    parse_strategy_options,
    plot_bands,
    run_seeds,
    simulated_search,
    strategy_names,
    values_at,
    write_out,
)
from .nb201_proxies import cache_path, proxy_column
from .nb201_table5 import PAPER_NAME, PUBLISHED, format_table5, table5_rows


@dataclasses.dataclass
class SearchOutcome(Outcome):
    """One seeded search (``method``: the strategy); ``curve``: (time, valid200 of the best so far) on change."""

    best_index: int = -1
    best_arch: str = ""
    reward: float = float("nan")  # 12-epoch validation (%) on the search dataset: what the search saw
    valid200: float = float("nan")  # 200-epoch validation (%) on the reported dataset: what is judged
    valid200_all: dict[str, float] = dataclasses.field(default_factory=dict)  # ... on every dataset (table5)
    evals_to_pick: int = 0  # evaluations until the picked cell was first evaluated
    warmup_seconds: float = 0.0  # simulated seconds charged for a proxy warm-up
    fit_seconds: float = dataclasses.field(default=0.0, compare=False)  # of strategy_seconds, fitting a model
    real_seconds: float = dataclasses.field(default=0.0, compare=False)
    not_applicable: str = ""


def run_search(strategy: str, seed: int, *, dataset: str = "cifar10", search_dataset: str = "cifar10",
               time_budget: float = 12_000.0, workers: int = 1, options: Mapping[str, Any] | None = None,
               noise: float = 0.0, proxy_cache: str | None = None) -> SearchOutcome:
    """One seeded run of the protocol. Only trials finished within ``time_budget`` count (as in the
    paper's code, a query that would end past the budget is not paid for and not seen); a warm-up's cost comes off
    it first (``proxy_cache``: where its proxy's values are)."""
    from nas.api import build_strategy
    from nas.engine.simulated import UnsupportedTrial
    from nas.engine.tabular.nb201_table import DATASETS, NB201Benchmark, load_table
    from nas.search_spaces.nb201 import NB201Space
    from nas.strategies.warmup import warm_up

    out = SearchOutcome(strategy, seed)
    t0 = time.perf_counter()
    table = load_table()
    strat = build_strategy(strategy, NB201Space(), seed, options, ["val_acc:max"])
    warmup = getattr(strat, "warmup", None)
    if warmup is not None:
        values, per_cell = proxy_column(str(proxy_cache), warmup.proxy)
        warm_up(strat, lambda archs: [values[table.row(a)] for a in archs])
        out.warmup_seconds = warmup.candidates * per_cell
    budget = time_budget - out.warmup_seconds
    try:
        loop, _ = simulated_search(strat, NB201Benchmark(search_dataset), seed=seed, workers=workers,
                                   time_budget=budget, noise=noise)
    except UnsupportedTrial as e:
        out.not_applicable = str(e)
        return out
    out.real_seconds = time.perf_counter() - t0
    out.strategy_seconds = loop.strategy_seconds
    out.fit_seconds = float(getattr(loop.strategy, "fit_seconds", 0.0))
    done = sorted((r.end_time, r.score, r.metrics["index"]) for _, r in loop.results()
                  if r.ok and r.end_time <= budget)
    out.trials = len(done)
    best = -np.inf
    for end, score, index in done:
        if score > best:
            best, out.best_index = score, index
            out.curve.append((end + out.warmup_seconds, float(table.valid200[dataset][index])))
    if out.best_index >= 0:
        out.best_arch = table.arch_str[out.best_index]
        out.reward = float(table.valid12[search_dataset][out.best_index])
        out.valid200 = float(table.valid200[dataset][out.best_index])
        out.valid200_all = {d: float(table.valid200[d][out.best_index]) for d in DATASETS}
        out.evals_to_pick = 1 + [index for _, _, index in done].index(out.best_index)
    return out


def summary_rows(outcomes: Sequence[SearchOutcome], dataset: str, search_dataset: str) -> list[dict[str, Any]]:
    rows = []
    published = PUBLISHED[dataset] if search_dataset == "cifar10" else {}
    for name in dict.fromkeys(o.method for o in outcomes):
        runs = [o for o in outcomes if o.method == name]
        ok = [o for o in runs if not o.not_applicable and o.best_index >= 0]
        paper = PAPER_NAME.get(name, "")
        ref = published.get(paper)
        row: dict[str, Any] = {"strategy": name, "runs": len(ok), "published": f"{paper} {ref[0]:.2f} +- {ref[1]:.2f}"
                               if ref else ""}
        if not ok:
            row["note"] = "n/a: " + (runs[0].not_applicable if runs else "no runs")
        else:
            v = np.array([o.valid200 for o in ok])
            row.update(mean=v.mean(), std=v.std(), **run_figures(ok, dataset))
        rows.append(row)
    for paper, ref in published.items():
        if paper not in PAPER_NAME.values() and paper != "optimum":
            rows.append({"strategy": "", "published": f"{paper} {ref[0]:.2f} +- {ref[1]:.2f}"})
    best = _valid200(dataset).max()
    opt = published.get("optimum")
    rows.append({"strategy": "optimum", "mean": best, "published": f"{opt[0]:.2f}" if opt else ""})
    return rows


def run_figures(ok: Sequence[SearchOutcome], dataset: str) -> dict[str, float]:
    """The columns every protocol prints beside the accuracy: trials, optimum found, evaluations to the pick, the
    strategy's ms per trial and, of those, its model fits'."""
    trials = sum(o.trials for o in ok)
    return {"trials": float(np.mean([o.trials for o in ok])),
            "found_optimum": float(np.mean([o.best_index == np.argmax(_valid200(dataset)) for o in ok])),
            "evals_to_pick": float(np.mean([o.evals_to_pick for o in ok])),
            "strategy_ms_per_trial": 1e3 * sum(o.strategy_seconds for o in ok) / trials,
            "fit_ms_per_trial": 1e3 * sum(o.fit_seconds for o in ok) / trials}


def _valid200(dataset: str) -> np.ndarray:
    from nas.engine.tabular.nb201_table import load_table

    return load_table().valid200[dataset]


def format_table(rows: Sequence[Mapping[str, Any]]) -> str:
    head = f"{'strategy':10s} {'runs':>4s} {'trials':>6s} {'valid-200 (%)':>16s} {'optimum':>7s} {'to pick':>7s} " \
           f"{'ms/trial':>8s} {'fit ms':>7s}  published (Dong & Yang 2020)"
    lines = [head, "-" * len(head)]
    blank = f"{'':4s} {'':6s} {'':16s} {'':7s} {'':7s} {'':8s} {'':7s}"
    for r in rows:
        if "std" in r:
            acc = f"{r['mean']:.2f} +- {r['std']:.2f}"
            lines.append(f"{r['strategy']:10s} {r['runs']:4d} {r['trials']:6.1f} {acc:>16s} "
                         f"{r['found_optimum']:7.0%} {r['evals_to_pick']:7.1f} {r['strategy_ms_per_trial']:8.3f} "
                         f"{r['fit_ms_per_trial']:7.2f}  {r['published']}")
        elif "mean" in r:
            lines.append(f"{r['strategy']:10s} {'':4s} {'':6s} {r['mean']:16.2f} {'':7s} {'':7s} {'':8s} {'':7s}  "
                         f"{r['published']}")
        elif r.get("note"):
            lines.append(f"{r['strategy']:10s} {r['note']}")
        else:
            lines.append(f"{'':10s} {blank}  {r['published']}")
    return "\n".join(lines)


def write_csv(outcomes: Sequence[SearchOutcome], path: Path, **meta: Any) -> None:
    import pandas as pd

    cols = ["seed", "trials", "best_index", "best_arch", "reward", "valid200", "evals_to_pick", "warmup_seconds",
            "strategy_seconds", "fit_seconds", "real_seconds", "not_applicable"]
    rows = [{**meta, "strategy": o.method, **{c: getattr(o, c) for c in cols}} for o in outcomes]
    write_out(path, pd.DataFrame(rows).to_csv(index=False, float_format="%.4f"))


def plot(outcomes: Sequence[SearchOutcome], path: Path, *, time_budget: float, title: str, optimum: float) -> None:
    """Best-so-far 200-epoch accuracy against simulated time: per strategy the mean over seeds (drawn once most
    runs have a result) with a band of one standard deviation."""
    import warnings

    grid = np.linspace(0, time_budget, 301)
    bands, lows = {}, []
    for name in dict.fromkeys(o.method for o in outcomes):
        runs = [o for o in outcomes if o.method == name and o.curve]
        if not runs:
            continue
        values = values_at(runs, grid)
        with warnings.catch_warnings():  # the columns before any run's first result are all NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            mean, std = np.nanmean(values, axis=0), np.nanstd(values, axis=0)
        mean[np.isnan(values).mean(axis=0) > 0.5] = np.nan
        bands[f"{name} ({len(runs)} runs)"] = (mean, std)
        lows.append(np.nanmin((mean - std)[grid >= 0.15 * time_budget]))
    plot_bands(grid, bands, path, xlabel="simulated time (s)",
               ylabel="200-epoch validation accuracy of the best cell so far (%)", title=title,
               lines=[(optimum, f"optimum {optimum:.2f}", ":")],
               ylim=(min(lows) - 0.3, optimum + 0.3) if lows else None)


def register(sub: argparse._SubParsersAction) -> None:
    p = add_experiment(sub, __doc__, cmd_strategies)
    p.add_argument("--protocol", choices=("per-dataset", "table5"), default="per-dataset",
                   help="per-dataset (default): search and judge on --dataset; table5: search on cifar10, judge the "
                        "cell found on all three datasets, beside the paper's Table 5")
    p.add_argument("--dataset", choices=list(PUBLISHED), default="cifar10",
                   help="whose 200-epoch validation accuracy judges the cell found (default cifar10)")
    p.add_argument("--strategies", help="comma-separated names (default: every registered strategy)")
    p.add_argument("--seeds", type=int, default=100, help="seeded runs per strategy (default 100)")
    p.add_argument("--time-budget", type=float, default=12_000.0, help="simulated seconds (default 12000)")
    p.add_argument("--workers", type=int, default=1, help="simulated workers (default 1, as the paper)")
    p.add_argument("--objective", action="append", default=[], metavar="METRIC[:max|min]",
                   help="two or more (repeatable): a multi-objective run of nas_benchmarks.nb201_mo's methods, "
                        "e.g. --objective val_acc:max --objective latency_ms:min (metrics: val_acc, latency_ms, "
                        "params)")
    p.add_argument("--proxy-cache", help="the proxy values a warm-up reads (default: nas bench proxies' cache in "
                                         "--out, channels 16, 1 cell per stage, batch 32)")
    p.add_argument("--quick", action="store_true", help="a smoke run: 3 seeds, 3000 simulated s" + QUICK_WINS)
    add_simulation_arguments(p)


def cmd_strategies(args: argparse.Namespace) -> int:
    check_runs(args, quick=(3, 3000.0))
    if args.protocol == "table5":
        if args.search_dataset not in (None, "cifar10") or args.dataset != "cifar10" or args.objective:
            raise ValueError("--protocol table5 searches on cifar10 and judges on every dataset: drop --dataset, "
                             "--search-dataset and --objective")
        args.search_dataset = "cifar10"
    args.search_dataset = args.search_dataset or args.dataset
    if args.objective:
        from .nb201_mo import cmd_mo

        return cmd_mo(args)
    names = strategy_names(args.strategies)
    check_noise(args.noise)
    options = parse_strategy_options(args.option, PROTOCOL_OPTIONS, names)
    check_strategy_options(names, options)
    if args.proxy_cache is not None and Path(args.proxy_cache).exists() and not Path(args.proxy_cache).is_file():
        raise ValueError(f"--proxy-cache {args.proxy_cache!r} is no regular file (a folder, a pipe or a device, "
                         f"which a warm-up would wait on or read forever); name the CSV nas bench proxies wrote")
    out_dir = make_export_dir(args.out)
    t0 = time.perf_counter()
    outcomes = run_seeds(run_search, names, range(args.seeds), jobs=args.jobs, options=options, dataset=args.dataset,
                         search_dataset=args.search_dataset, time_budget=args.time_budget, workers=args.workers,
                         noise=args.noise, proxy_cache=args.proxy_cache or str(cache_path(args.out, 16, 1, 32)))
    wall = time.perf_counter() - t0
    noise = f", reward noise {args.noise:g}" if args.noise else ""
    if args.protocol == "table5":
        title = (f"NAS-Bench-201, Table 5 protocol: search on cifar10 12-epoch validation{noise}, the cell found "
                 f"judged on every dataset ({args.time_budget:g} simulated s, {args.workers} worker(s), "
                 f"{args.seeds} seeds)")
        print(title)
        print(format_table5(table5_rows(outcomes)))
    else:
        title = (f"NAS-Bench-201 {args.dataset}, per-dataset protocol (search on {args.search_dataset} 12-epoch "
                 f"validation{noise}, {args.time_budget:g} simulated s, {args.workers} worker(s), {args.seeds} seeds)")
        print(title)
        print(format_table(summary_rows(outcomes, args.dataset, args.search_dataset)))
    stem = out_dir / f"strategies-{args.dataset if args.protocol != 'table5' else 'table5'}"
    write_csv(outcomes, stem.with_suffix(".csv"), dataset=args.dataset, search_dataset=args.search_dataset,
              time_budget=args.time_budget, workers=args.workers, noise=args.noise)
    plot(outcomes, stem.with_suffix(".png"), time_budget=args.time_budget, title=title,
         optimum=float(_valid200(args.dataset).max()))
    print(f"{len(outcomes)} runs in {wall:.1f} s real time; wrote {stem}.csv and {stem}.png")
    return 0
