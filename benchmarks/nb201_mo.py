"""``nas bench strategies --objective ...``: multi-objective searches on the simulated NAS-Bench-201 (hypervolume).

E.g. ``--objective val_acc:max --objective latency_ms:min``: the hypervolume of the front each method finds
against simulated time, with its table, CSV and plot.

What is searched: the NAS-Bench-201 protocol of :mod:`nas_benchmarks.nb201_strategies` (12,000 simulated seconds, one
worker, each query charged its 12-epoch training time) with two or more objectives from the shipped table:
``val_acc`` (the 12-epoch validation accuracy, a fraction), ``latency_ms`` (the cell's inference latency) and
``params`` (its parameter count), each ``metric:max`` or ``metric:min``.

What is measured: the front a run found (the non-dominated trials among those finished within the budget,
ranked on what the search saw) is judged with ``val_acc`` replaced by each member's 200-epoch validation
accuracy (mean over the table's seeds, what NAS-Bench-201 reports); its hypervolume (moocore, through
:mod:`nas.core.objectives`) is given as a percentage of the hypervolume of the table's TRUE front: all
15,625 cells enumerated and judged the same way. The reference point is :func:`nas.core.front.reference_point`
of every cell's judged values (each objective's worst less 10% of its range), one point for every method,
so the numbers compare. A second optimum row, "12-epoch front", is exhaustive search on the proxy: every
cell queried, the front on the 12-epoch accuracy, judged on the 200-epoch one (what a search that sees
only 12-epoch accuracy can reach at best). The table gives, per method, the mean over seeds with a 95%
confidence interval of the mean (1.96 standard errors), at a tenth of the budget and at its end; the
plot (matplotlib, log time axis) the mean curve with the same band.

Methods: multi-objective regularized evolution (population 10, tournament 3, as the single-objective
protocol), Optuna's NSGA-II (population 10) and multi-objective TPE, random search, and ParEGO's random
scalarization (:class:`nas.core.scalarize.Scalarized`) around the REINFORCE controller (``parego-rl``).

>>> out = run_mo("evolution", 0, ["val_acc:max", "latency_ms:min"], time_budget=3000)
>>> out.trials > 10, 50 < out.hv_pct <= 100, out.curve[-1][1] == out.hv_pct
(True, True, True)
>>> rows = summary_rows([MOOutcome("random", 0, trials=2, front=[1], curve=[(50.0, 40.0), (500.0, 60.0)])], 1000.0,
...                     {"hv": 2.0, "size": 3, "proxy_hv": 1.9, "proxy_size": 4})
>>> rows[1][:6], rows[-2][-2]
(['random', '1', '2.0', '1.0', '40.00 +- nan', '60.00 +- nan'], '95.00')
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nas.core import objectives as core
from nas.core.front import reference_point
from nas.core.objectives import Objectives
from nas.run.export import make_export_dir

from .harness import (
    Outcome,
    mean_ci,
    parse_strategy_options,
    plot_bands,
    run_seeds,
    simulated_search,
    text_table,
    values_at,
    write_out,
)

#: method label -> (registered strategy, its options)
METHODS: dict[str, tuple[str, dict[str, Any]]] = {
    "evolution": ("evolution", {"population": 10, "sample_size": 3}),
    "nsga2": ("optuna", {"sampler": "nsga2", "population": 10}),
    "tpe": ("optuna", {"sampler": "tpe"}),
    "random": ("random", {}),
    "parego-rl": ("rl", {}),
}
METRICS = ("val_acc", "latency_ms", "params")  # what the table answers for every cell


def check_objectives(specs: Sequence[str]) -> Objectives:
    obj = Objectives(specs)
    if len(obj) < 2:
        raise ValueError(f"a multi-objective benchmark needs two or more --objective, got {obj.to_list()}")
    for m in obj.metrics:
        if m not in METRICS:
            raise ValueError(f"objective metric {m!r} is not in the NAS-Bench-201 table; allowed: {', '.join(METRICS)}")
    return obj


@functools.lru_cache(maxsize=8)
def cell_scores(dataset: str, search_dataset: str, objectives: tuple[str, ...], judged: bool) -> np.ndarray:
    """Every cell's higher-is-better scores (cells x objectives): as the search sees them (``val_acc`` at 12
    epochs on ``search_dataset``) or judged (``val_acc`` at 200 epochs on ``dataset``)."""
    from nas.engine.tabular.nb201_table import load_cell_costs, load_table

    table = load_table()
    params, latency = load_cell_costs()[search_dataset]
    acc = table.valid200[dataset] if judged else table.valid12[search_dataset]
    values = {"val_acc": acc / 100.0, "latency_ms": latency, "params": params}
    obj = Objectives(objectives)
    return np.column_stack([o.score(1.0) * values[o.metric] for o in obj]).astype(float)


def reference(dataset: str, search_dataset: str, objectives: tuple[str, ...]) -> list[float]:
    return reference_point(cell_scores(dataset, search_dataset, objectives, True))


@functools.lru_cache(maxsize=8)
def optimum(dataset: str, search_dataset: str, objectives: tuple[str, ...]) -> dict[str, float]:
    """The table's true front (judged) and exhaustive search on the 12-epoch proxy: sizes and hypervolumes."""
    judged = cell_scores(dataset, search_dataset, objectives, True)
    ref = reference(dataset, search_dataset, objectives)
    true_front = core.nondominated(judged)
    proxy_front = core.nondominated(cell_scores(dataset, search_dataset, objectives, False))
    return {"hv": core.hypervolume(judged[true_front], ref), "size": int(true_front.sum()),
            "proxy_hv": core.hypervolume(judged[proxy_front], ref), "proxy_size": int(proxy_front.sum())}


@dataclasses.dataclass
class MOOutcome(Outcome):
    """One seeded multi-objective search; ``curve``: (time, judged hypervolume as % of the optimum's) on change."""

    front: list[int] = dataclasses.field(default_factory=list)  # cell indices of the front found
    hv_pct: float = 0.0  # its judged hypervolume, % of the true front's


def run_mo(method: str, seed: int, objectives: Sequence[str], *, dataset: str = "cifar10",
           search_dataset: str = "cifar10", time_budget: float = 12_000.0, workers: int = 1,
           options: Mapping[str, Any] | None = None) -> MOOutcome:
    """One seeded multi-objective run of ``method`` (a :data:`METHODS` label); only trials finished within
    ``time_budget`` count, as in :func:`.nb201_strategies.run_search`."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; known: {', '.join(METHODS)}")
    specs = tuple(check_objectives(objectives).to_list())
    name, defaults = METHODS[method]
    loop, _ = simulated_search(name, f"nb201-{search_dataset}", seed=seed, workers=workers, time_budget=time_budget,
                               options={**defaults, **(options or {})}, objectives=specs)
    out = MOOutcome(method, seed, strategy_seconds=loop.strategy_seconds)
    done = sorted((r.end_time, int(r.metrics["index"])) for _, r in loop.results()
                  if r.ok and r.end_time is not None and r.end_time <= time_budget)
    out.trials = len(done)
    seen = cell_scores(dataset, search_dataset, specs, False)
    judged = cell_scores(dataset, search_dataset, specs, True)
    ref, best = reference(dataset, search_dataset, specs), optimum(dataset, search_dataset, specs)["hv"]
    front: list[int] = []
    for end, index in done:
        p = seen[index]
        if front and (seen[front] >= p).all(axis=1).any():
            continue  # weakly dominated by (or equal to) a member: the front stays
        front = [i for i in front if not (p >= seen[i]).all()] + [index]
        out.curve.append((float(end), 100.0 * core.hypervolume(judged[front], ref) / best))
    out.front = front
    out.hv_pct = out.curve[-1][1] if out.curve else 0.0
    return out


def summary_rows(outcomes: Sequence[MOOutcome], time_budget: float, opt: Mapping[str, float]) -> list[list[str]]:
    """The table: per method, runs, trials, front size, and the hypervolume (% of the true front's, mean
    +- 95% CI) at a tenth of the budget and at its end; then the optimum rows."""
    early = time_budget / 10
    rows = [["method", "runs", "trials", "front", f"HV% @ {early:g} s", f"HV% @ {time_budget:g} s",
             "strategy ms/trial"]]
    for m in dict.fromkeys(o.method for o in outcomes):
        runs = [o for o in outcomes if o.method == m]
        cells = []
        mean, half = mean_ci(values_at(runs, np.array([early, time_budget]), before=0.0))
        cells += [f"{m:.2f} +- {h:.2f}" for m, h in zip(mean, half)]
        trials = sum(o.trials for o in runs)
        rows.append([m, str(len(runs)), f"{trials / len(runs):.1f}", f"{np.mean([len(o.front) for o in runs]):.1f}",
                     *cells, f"{1e3 * sum(o.strategy_seconds for o in runs) / max(trials, 1):.3f}"])
    rows.append(["12-epoch front", "", "15625", str(opt["proxy_size"]), "", f"{100 * opt['proxy_hv'] / opt['hv']:.2f}",
                 ""])
    rows.append(["optimum", "", "15625", str(opt["size"]), "", "100.00", ""])
    return rows


def write_csv(outcomes: Sequence[MOOutcome], path: Any, **meta: Any) -> None:
    import pandas as pd

    frame = pd.DataFrame([{**meta, "method": o.method, "seed": o.seed, "trials": o.trials,
                           "front_size": len(o.front), "hv_pct": o.hv_pct, "strategy_seconds": o.strategy_seconds,
                           "front": ";".join(map(str, o.front))} for o in outcomes])
    write_out(path, frame.to_csv(index=False, float_format="%.4f"))


def cmd_mo(args: Any) -> int:
    """``nas bench strategies`` with ``--objective``: every method of :data:`METHODS` (or ``--strategies``,
    as method labels), the table and the plot."""
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
    out_dir = make_export_dir(args.out)
    t0 = time.perf_counter()
    outcomes = run_seeds(run_mo, methods, range(args.seeds), jobs=args.jobs, options=options, objectives=specs,
                         dataset=args.dataset, search_dataset=args.search_dataset, time_budget=args.time_budget,
                         workers=args.workers)
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


def plot_hypervolume(outcomes: Sequence[MOOutcome], path: Path, *, time_budget: float, title: str,
                     proxy: float) -> None:
    """The hypervolume found against simulated time (log axis): per method the mean with its 95% confidence band."""
    start = min((o.curve[0][0] for o in outcomes if o.curve), default=1.0)
    grid = np.geomspace(max(start * 0.9, 1.0), time_budget, 300)
    bands = {}
    for name in dict.fromkeys(o.method for o in outcomes):
        runs = [o for o in outcomes if o.method == name]
        bands[f"{name} ({len(runs)} runs)"] = mean_ci(values_at(runs, grid, before=0.0))
    lines = [(100.0, "true front (all cells, 200 epochs)", ":"),
             (proxy, f"front on 12-epoch accuracy, all cells ({proxy:.2f})", "--")]
    low = min((float(np.nanmin(m - np.nan_to_num(h))) for m, h in bands.values()), default=80.0)
    plot_bands(grid, bands, path, xlabel="simulated time (s, log scale)",
               ylabel="hypervolume of the front found (% of the true front's)", title=title, lines=lines,
               log_x=True, ylim=(max(0.0, min(low - 1.0, 80.0)), 100.5), small=True)
