"""``nas bench strategies``: every registered strategy on NAS-Bench-201, side by side with the paper.

The protocol of NAS-Bench-201 (Dong & Yang, ICLR 2020, Table 5): search on the CIFAR-10 ``valid``
split with the 12-epoch validation accuracy as the reward, within 12,000 simulated seconds (each
query costs its 12-epoch training time), one worker; then judge the best cell found (best reward)
by its 200-epoch validation accuracy, the mean over the table's seeds, on the reported dataset.
The paper searches on CIFAR-10 and reports the same cells on CIFAR-100 and ImageNet16-120; so does
``--dataset`` here (``--search-dataset`` changes what is searched on).

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

from . import add_experiment
from .harness import (
    PROTOCOL_OPTIONS,
    Outcome,
    add_simulation_arguments,
    check_runs,
    parse_strategy_options,
    plot_bands,
    run_seeds,
    simulated_search,
    strategy_names,
    values_at,
)

#: NAS-Bench-201, Table 5: validation accuracy (%) after 200 epochs of the cell each method found,
#: searching on CIFAR-10, mean +- std over 500 runs; "optimum" is the best cell of the benchmark.
PUBLISHED: dict[str, dict[str, tuple[float, float]]] = {
    "cifar10": {"REA": (91.19, 0.31), "REINFORCE": (91.09, 0.37), "RS": (90.93, 0.36), "BOHB": (90.82, 0.53),
                "optimum": (91.61, 0.0)},
    "cifar100": {"REA": (71.81, 1.12), "REINFORCE": (71.61, 1.12), "RS": (70.93, 1.09), "BOHB": (70.74, 1.29),
                 "optimum": (73.49, 0.0)},
    "imagenet16": {"REA": (45.15, 0.89), "REINFORCE": (45.05, 1.02), "RS": (44.45, 1.10), "BOHB": (44.26, 1.36),
                   "optimum": (46.77, 0.0)},
}
#: our strategy -> the paper's method it implements
PAPER_NAME = {"evolution": "REA", "rl": "REINFORCE", "random": "RS"}


@dataclasses.dataclass
class SearchOutcome(Outcome):
    """One seeded search (``method``: the strategy); ``curve``: (time, valid200 of the best so far) on change."""

    best_index: int = -1
    best_arch: str = ""
    reward: float = float("nan")  # 12-epoch validation (%) on the search dataset: what the search saw
    valid200: float = float("nan")  # 200-epoch validation (%) on the reported dataset: what is judged
    real_seconds: float = dataclasses.field(default=0.0, compare=False)
    not_applicable: str = ""


def run_search(strategy: str, seed: int, *, dataset: str = "cifar10", search_dataset: str = "cifar10",
               time_budget: float = 12_000.0, workers: int = 1, options: Mapping[str, Any] | None = None,
               noise: float = 0.0) -> SearchOutcome:
    """One seeded run of the protocol. Only trials finished within ``time_budget`` count (as in the
    paper's code, a query that would end past the budget is not paid for and not seen)."""
    from nas.engine.simulated import UnsupportedTrial
    from nas.engine.tabular.nb201_table import NB201Benchmark, load_table

    out = SearchOutcome(strategy, seed)
    t0 = time.perf_counter()
    try:
        loop, _ = simulated_search(strategy, NB201Benchmark(search_dataset), seed=seed, options=options,
                                   workers=workers, time_budget=time_budget, noise=noise)
    except UnsupportedTrial as e:
        out.not_applicable = str(e)
        return out
    out.real_seconds = time.perf_counter() - t0
    out.strategy_seconds = loop.strategy_seconds
    table = load_table()
    done = sorted((r.end_time, r.score, r.metrics["index"]) for _, r in loop.results()
                  if r.ok and r.end_time <= time_budget)
    out.trials = len(done)
    best = -np.inf
    for end, score, index in done:
        if score > best:
            best, out.best_index = score, index
            out.curve.append((end, float(table.valid200[dataset][index])))
    if out.best_index >= 0:
        out.best_arch = table.arch_str[out.best_index]
        out.reward = float(table.valid12[search_dataset][out.best_index])
        out.valid200 = float(table.valid200[dataset][out.best_index])
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
            row.update(mean=v.mean(), std=v.std(), trials=np.mean([o.trials for o in ok]),
                       found_optimum=np.mean([o.best_index == np.argmax(_valid200(dataset)) for o in ok]),
                       strategy_ms_per_trial=1e3 * sum(o.strategy_seconds for o in ok) / sum(o.trials for o in ok))
        rows.append(row)
    for paper, ref in published.items():
        if paper not in PAPER_NAME.values() and paper != "optimum":
            rows.append({"strategy": "", "published": f"{paper} {ref[0]:.2f} +- {ref[1]:.2f}"})
    best = _valid200(dataset).max()
    opt = published.get("optimum")
    rows.append({"strategy": "optimum", "mean": best, "published": f"{opt[0]:.2f}" if opt else ""})
    return rows


def _valid200(dataset: str) -> np.ndarray:
    from nas.engine.tabular.nb201_table import load_table

    return load_table().valid200[dataset]


def format_table(rows: Sequence[Mapping[str, Any]]) -> str:
    head = f"{'strategy':10s} {'runs':>4s} {'trials':>6s} {'valid-200 (%)':>16s} {'optimum':>7s} " \
           f"{'ms/trial':>8s}  published (Dong & Yang 2020)"
    lines = [head, "-" * len(head)]
    for r in rows:
        if "std" in r:
            acc = f"{r['mean']:.2f} +- {r['std']:.2f}"
            lines.append(f"{r['strategy']:10s} {r['runs']:4d} {r['trials']:6.1f} {acc:>16s} "
                         f"{r['found_optimum']:7.0%} {r['strategy_ms_per_trial']:8.3f}  {r['published']}")
        elif "mean" in r:
            lines.append(f"{r['strategy']:10s} {'':4s} {'':6s} {r['mean']:16.2f} {'':7s} {'':8s}  {r['published']}")
        elif r.get("note"):
            lines.append(f"{r['strategy']:10s} {r['note']}")
        else:
            lines.append(f"{'':10s} {'':4s} {'':6s} {'':16s} {'':7s} {'':8s}  {r['published']}")
    return "\n".join(lines)


def write_csv(outcomes: Sequence[SearchOutcome], path: Path, **meta: Any) -> None:
    import pandas as pd

    cols = ["seed", "trials", "best_index", "best_arch", "reward", "valid200", "strategy_seconds", "real_seconds",
            "not_applicable"]
    rows = [{**meta, "strategy": o.method, **{c: getattr(o, c) for c in cols}} for o in outcomes]
    pd.DataFrame(rows).to_csv(path, index=False, float_format="%.4f")


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
    p.add_argument("--quick", action="store_true", help="a smoke run: 3 seeds, 3000 simulated s")
    add_simulation_arguments(p)


def cmd_strategies(args: argparse.Namespace) -> int:
    check_runs(args, quick=(3, 3000.0))
    if args.objective:
        from .nb201_mo import cmd_mo

        return cmd_mo(args)
    names = strategy_names(args.strategies)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    outcomes = run_seeds(run_search, names, range(args.seeds), jobs=args.jobs,
                         options=parse_strategy_options(args.option, PROTOCOL_OPTIONS), dataset=args.dataset,
                         search_dataset=args.search_dataset, time_budget=args.time_budget, workers=args.workers,
                         noise=args.noise)
    wall = time.perf_counter() - t0
    title = (f"NAS-Bench-201 {args.dataset} (search on {args.search_dataset} 12-epoch validation, "
             f"{args.time_budget:g} simulated s, {args.workers} worker(s), {args.seeds} seeds)")
    print(title)
    print(format_table(summary_rows(outcomes, args.dataset, args.search_dataset)))
    stem = out_dir / f"strategies-{args.dataset}"
    write_csv(outcomes, stem.with_suffix(".csv"), dataset=args.dataset, search_dataset=args.search_dataset,
              time_budget=args.time_budget, workers=args.workers, noise=args.noise)
    plot(outcomes, stem.with_suffix(".png"), time_budget=args.time_budget, title=title,
         optimum=float(_valid200(args.dataset).max()))
    print(f"{len(outcomes)} runs in {wall:.1f} s real time; wrote {stem}.csv and {stem}.png")
    return 0
