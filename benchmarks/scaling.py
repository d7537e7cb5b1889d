"""``nas bench scaling``: one search on the simulated NAS-Bench-201 at 1, 4, 16, 64, 256 workers.

Each run finishes the same number of trials (``--trials``) asynchronously on W simulated workers. Per W
it reports the simulated time until the best reward so far reaches a target (a cell of the table's top
``--target-top`` fraction by 12-epoch validation accuracy), the speed-up of that time against 1 worker,
and the run's work, depth and average parallelism in the Work-Depth model (Blelloch 1996): work =
training seconds summed over trials, depth = simulated wall time, parallelism = work / depth. Asynchrony
costs sample efficiency (a strategy at W workers decides with up to W-1 results still outstanding), so
the trials needed to reach the target grow with W, and the speed-up falls below W; both are shown.
It also reports the real time the strategy spent per trial (ask + tell) and the loop's real time per
trial in all (strategy, loop and simulated executor).

>>> rows = scaling_rows("random", [1, 4], seeds=[0, 1], trials=200, target=80.0)
>>> [r["workers"] for r in rows], rows[0]["reached"], rows[1]["parallelism"] > 3
([1, 4], 2, True)
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from nas.run.export import make_export_dir

from . import add_experiment
from .harness import (
    PROTOCOL_OPTIONS,
    add_simulation_arguments,
    check_noise,
    check_strategy_options,
    int_list,
    parse_strategy_options,
    run_seeds,
    simulated_search,
    strategy_name,
    text_table,
    write_out,
)


@dataclasses.dataclass
class ScalingRun:
    workers: int
    seed: int
    trials: int
    time_to_target: float  # simulated seconds; NaN when not reached
    trials_to_target: float
    work: float
    depth: float
    strategy_seconds: float
    real_seconds: float


def run_scaling(workers: int, seed: int, *, strategy: str, trials: int, target: float,
                search_dataset: str = "cifar10", options: dict[str, Any] | None = None,
                noise: float = 0.0) -> ScalingRun:
    from nas.engine.tabular.nb201_table import NB201Benchmark

    t0 = time.perf_counter()
    loop, executor = simulated_search(strategy, NB201Benchmark(search_dataset), seed=seed, options=options,
                                      workers=workers, budget=trials, noise=noise)
    real = time.perf_counter() - t0
    ends = sorted((r.end_time, r.metrics.get("valid_acc_12", -1.0)) for _, r in loop.results() if r.ok)
    hit = next((k for k, (_, acc) in enumerate(ends) if acc >= target), None)
    return ScalingRun(workers, seed, loop.finished, ends[hit][0] if hit is not None else float("nan"),
                      hit + 1 if hit is not None else float("nan"), executor.work, executor.now(),
                      loop.strategy_seconds, real)


def target_for(top: float, search_dataset: str) -> float:
    """The 12-epoch validation accuracy (%) of the table's top ``top`` fraction of cells."""
    from nas.engine.tabular.nb201_table import load_table

    if not 0 < top < 1:
        raise ValueError(f"--target-top must be a fraction in (0, 1), got {top}")
    v = np.sort(load_table().valid12[search_dataset])[::-1]
    return float(v[max(0, int(np.ceil(top * len(v))) - 1)])


def scaling_rows(strategy: str, workers: Sequence[int], *, seeds: Sequence[int], trials: int, target: float,
                 jobs: int = 1, options: dict[str, Any] | None = None, **kwargs: Any) -> list[dict[str, Any]]:
    done = run_seeds(run_scaling, workers, seeds, jobs=jobs, options={w: options or {} for w in workers},
                     strategy=strategy, trials=trials, target=target, **kwargs)
    rows: list[dict[str, Any]] = []
    for w in workers:
        runs = [r for r in done if r.workers == w]
        t = np.array([r.time_to_target for r in runs])
        reached = t[~np.isnan(t)]
        n = sum(r.trials for r in runs)
        work, depth = sum(r.work for r in runs) / len(runs), sum(r.depth for r in runs) / len(runs)
        rows.append({
            "workers": w, "runs": len(runs), "reached": len(reached),
            "time_to_target": float(reached.mean()) if len(reached) else float("nan"),
            "trials_to_target": float(np.nanmean([r.trials_to_target for r in runs])) if len(reached) else float("nan"),
            "work": work, "depth": depth, "parallelism": work / depth if depth else float("nan"),
            "strategy_us_per_trial": 1e6 * sum(r.strategy_seconds for r in runs) / n,
            "real_us_per_trial": 1e6 * sum(r.real_seconds for r in runs) / n,
        })
    base = rows[0]["time_to_target"] if rows and rows[0]["workers"] == 1 else float("nan")
    for r in rows:
        r["speedup"] = base / r["time_to_target"] if r["time_to_target"] > 0 else float("nan")
    return rows


def format_rows(rows: Sequence[dict[str, Any]]) -> str:
    head = ["workers", "reached", "time to target (s)", "speed-up", "trials to target", "work (s)", "depth (s)",
            "parallelism", "strategy us/trial", "loop us/trial"]
    return text_table([head] + [
        [str(r["workers"]), f"{r['reached']}/{r['runs']}", f"{r['time_to_target']:.0f}", f"{r['speedup']:.2f}",
         f"{r['trials_to_target']:.1f}", f"{r['work']:.0f}", f"{r['depth']:.0f}", f"{r['parallelism']:.1f}",
         f"{r['strategy_us_per_trial']:.1f}", f"{r['real_us_per_trial']:.1f}"]
        for r in rows], rule=True)


def register(sub: argparse._SubParsersAction) -> None:
    p = add_experiment(sub, __doc__, cmd_scaling)
    p.add_argument("--strategy", default="evolution", help="a registered strategy (default evolution)")
    p.add_argument("--workers", default="1,4,16,64,256", help="comma-separated worker counts (default 1,4,16,64,256)")
    p.add_argument("--seeds", type=int, default=10, help="seeded runs per worker count (default 10)")
    p.add_argument("--trials", type=int, default=1500, help="trials each run finishes (default 1500)")
    p.add_argument("--target-top", type=float, default=0.001,
                   help="target: reach a cell of this top fraction by 12-epoch validation (default 0.001)")
    add_simulation_arguments(p)


def cmd_scaling(args: argparse.Namespace) -> int:
    args.search_dataset = args.search_dataset or "cifar10"  # (no --dataset here: the paper's)
    strategy_name(args.strategy)
    workers = int_list(args.workers, "--workers")
    if any(w < 1 for w in workers) or args.seeds < 1 or args.trials < 1 or args.jobs < 1:
        raise ValueError(f"workers, --seeds, --trials and --jobs must be >= 1, got {workers}, {args.seeds}, "
                         f"{args.trials}, {args.jobs}")
    target = target_for(args.target_top, args.search_dataset)
    check_noise(args.noise)
    all_options = parse_strategy_options(args.option, PROTOCOL_OPTIONS, [args.strategy])
    check_strategy_options([args.strategy], all_options)
    options = all_options.get(args.strategy, {})
    print(f"{args.strategy} on NAS-Bench-201 ({args.search_dataset}), {args.trials} trials per run, "
          f"{args.seeds} seeds; target: 12-epoch validation >= {target:.2f}% (top {args.target_top:.1%} of cells); "
          f"options {options}")
    rows = scaling_rows(args.strategy, workers, seeds=range(args.seeds), trials=args.trials, target=target,
                        jobs=args.jobs, search_dataset=args.search_dataset, options=options, noise=args.noise)
    print(format_rows(rows))

    import pandas as pd

    out = make_export_dir(args.out)
    write_out(out / f"scaling-{args.strategy}.csv", pd.DataFrame(rows).to_csv(index=False, float_format="%.4f"))
    print(f"wrote {out / f'scaling-{args.strategy}.csv'}")
    return 0
