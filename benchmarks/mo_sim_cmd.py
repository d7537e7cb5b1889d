"""The table, CSV and plot of ``nas bench strategies --objective ...`` (what they measure: :mod:`.mo_sim`).

>>> from nas_benchmarks.mo_sim import MOOutcome
>>> rows = summary_rows([MOOutcome("random", 0, trials=2, front=[1], curve=[(50.0, 40.0), (500.0, 60.0)])], 1000.0,
...                     {"hv": 2.0, "size": 3, "proxy_hv": 1.9, "proxy_size": 4})
>>> rows[1][:6], rows[-2][-2]
(['random', '1', '2.0', '1.0', '40.00 +- nan', '60.00 +- nan'], '95.00')
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .mo_sim import (
    METHODS,
    MOOutcome,
    check_objectives,
    hv_at,
    mean_ci,
    optimum,
    reference,
    run_all_mo,
)


def summary_rows(outcomes: Sequence[MOOutcome], time_budget: float, opt: Mapping[str, float]) -> list[list[str]]:
    """The table: per method, runs, trials, front size, and the hypervolume (% of the true front's, mean
    +- 95% CI) at a tenth of the budget and at its end; then the optimum rows."""
    early = time_budget / 10
    rows = [["method", "runs", "trials", "front", f"HV% @ {early:g} s", f"HV% @ {time_budget:g} s",
             "strategy ms/trial"]]
    for m in dict.fromkeys(o.method for o in outcomes):
        runs = [o for o in outcomes if o.method == m]
        cells = []
        for t in (early, time_budget):
            mean, half = mean_ci(np.array([hv_at(o, np.array([t]))[0] for o in runs]))
            cells.append(f"{mean:.2f} +- {half:.2f}")
        trials = sum(o.trials for o in runs)
        rows.append([m, str(len(runs)), f"{trials / len(runs):.1f}", f"{np.mean([len(o.front) for o in runs]):.1f}",
                     *cells, f"{1e3 * sum(o.strategy_seconds for o in runs) / max(trials, 1):.3f}"])
    rows.append(["12-epoch front", "", "15625", str(opt["proxy_size"]), "", f"{100 * opt['proxy_hv'] / opt['hv']:.2f}",
                 ""])
    rows.append(["optimum", "", "15625", str(opt["size"]), "", "100.00", ""])
    return rows


def write_csv(outcomes: Sequence[MOOutcome], path: Any, **meta: Any) -> None:
    import pandas as pd

    pd.DataFrame([{**meta, "method": o.method, "seed": o.seed, "trials": o.trials, "front_size": len(o.front),
                   "hv_pct": o.hv_pct, "strategy_seconds": o.strategy_seconds,
                   "front": ";".join(map(str, o.front))} for o in outcomes]).to_csv(path, index=False,
                                                                                    float_format="%.4f")


def cmd_mo(args: Any) -> int:
    """``nas bench strategies`` with ``--objective``: every method of :data:`METHODS` (or ``--strategies``,
    as method labels), the table and the plot."""
    from pathlib import Path

    from .harness import text_table
    from .mo_plot import plot_hypervolume
    from .nb201_strategies import parse_strategy_options

    specs = check_objectives(args.objective).to_list()
    if args.noise:
        raise ValueError(f"--noise {args.noise:g} is not supported with --objective (the table's values are used)")
    methods = [m.strip() for m in (args.strategies or ",".join(METHODS)).split(",") if m.strip()]
    for m in methods:
        if m not in METHODS:
            raise ValueError(f"unknown method {m!r} for --objective runs; known: {', '.join(METHODS)}")
    options = parse_strategy_options(args.option)  # keyed by method label here (-o nsga2.population=20)
    for m in options:
        if m not in METHODS:
            raise ValueError(f"-o {m}.KEY=VALUE: {m!r} is not a method of --objective runs; "
                             f"known: {', '.join(METHODS)}")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    outcomes = run_all_mo(methods, range(args.seeds), specs, jobs=args.jobs, options=options, dataset=args.dataset,
                          search_dataset=args.search_dataset, time_budget=args.time_budget, workers=args.workers)
    wall = time.perf_counter() - t0
    opt = optimum(args.dataset, args.search_dataset, tuple(specs))
    title = (f"NAS-Bench-201 {' vs '.join(specs)}\n(search on {args.search_dataset} 12-epoch val_acc, judged on "
             f"{args.dataset} 200-epoch; {args.time_budget:g} simulated s, {args.workers} worker(s), "
             f"{args.seeds} seeds)")
    print(title)
    print(f"hypervolume as % of the true front's ({opt['size']} cells, HV {opt['hv']:.6g}; reference "
          f"{[round(r, 4) for r in reference(args.dataset, args.search_dataset, tuple(specs))]}), "
          f"mean +- 95% CI of the mean")
    print(text_table(summary_rows(outcomes, args.time_budget, opt), rule=True))
    stem = out_dir / f"mo-{'-'.join(s.split(':')[0] for s in specs)}-{args.dataset}"
    write_csv(outcomes, stem.with_suffix(".csv"), objectives=" ".join(specs), dataset=args.dataset,
              time_budget=args.time_budget)
    plot_hypervolume(outcomes, stem.with_suffix(".png"), time_budget=args.time_budget, title=title,
                     proxy=100 * opt["proxy_hv"] / opt["hv"])
    print(f"{len(outcomes)} runs in {wall:.1f} s real time; wrote {stem}.csv and {stem}.png")
    return 0
