"""``nas bench optimum``: how many evaluations a strategy needs to reach NAS-Bench-201's best-validation cell.

White, Nolen & Savani 2021 ("Local search is state of the art for NAS benchmarks") report that local search
reaches the CIFAR-100 optimum of NAS-Bench-201 after about 127 evaluated architectures on average. Here each
(strategy, seed) runs through the real loop on the simulated executor (one worker, no time budget) until it
evaluates the best cell by its reward, or until ``--max-evals``: the reward is the validation accuracy of
``--epochs`` 200 (the table's mean over seeds; the optimum is the best 200-epoch validation cell, as in their
setting) or 12 (the NAS-Bench-201 search protocol's reward; the optimum is the best 12-epoch cell, which the
search can recognise). Printed: runs that reached it, and the mean and median evaluations to it over those runs.

>>> out = run_until("local", 0, dataset="cifar100", epochs=200, max_evals=400)
>>> out.reached, 1 <= out.evals <= 400
(True, True)
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nas.engine.interfaces import Callback, LoopStatus

from . import add_experiment
from .harness import (
    Outcome,
    at_least,
    check_strategy_options,
    parse_strategy_options,
    run_seeds,
    simulated_search,
    strategy_names,
    text_table,
)

PUBLISHED = {("local", "cifar100"): "local search ~127 (White et al. 2021)"}


@dataclasses.dataclass
class OptimumOutcome(Outcome):
    evals: int = 0  # evaluations until the optimum (or all of them, where it was not reached)
    reached: bool = False


class _StopAtOptimum(Callback):
    def __init__(self, optimum: set[int], stop: Any) -> None:
        self.optimum, self.stop, self.count, self.hit = optimum, stop, 0, 0

    def on_result(self, status: LoopStatus, trial: Any, result: Any) -> None:
        self.count += 1
        if not self.hit and result.ok and result.metrics.get("index") in self.optimum:
            self.hit = self.count
            self.stop.request()


def optimum_cells(dataset: str, epochs: int) -> set[int]:
    """The cells of the best reward (ties included)."""
    from nas.engine.tabular.nb201_table import load_table

    table = load_table()
    values = (table.valid200 if epochs == 200 else table.valid12)[dataset]
    return {int(i) for i in np.flatnonzero(values == values.max())}


def run_until(strategy: str, seed: int, *, dataset: str = "cifar100", epochs: int = 200, max_evals: int = 3000,
              options: Mapping[str, Any] | None = None) -> OptimumOutcome:
    """One seeded search until it evaluates the optimum of ``dataset`` at ``epochs``, or ``max_evals`` results."""
    from nas.engine.stop import StopSignal
    from nas.engine.tabular.nb201_table import NB201Fidelities

    stop = StopSignal("cancel")
    watch = _StopAtOptimum(optimum_cells(dataset, epochs), stop)
    loop, _ = simulated_search(strategy, NB201Fidelities(dataset), seed=seed, budget=max_evals, epochs=epochs,
                               options=options, callbacks=[watch], stop=stop)
    return OptimumOutcome(strategy, seed, trials=watch.count, strategy_seconds=loop.strategy_seconds,
                          evals=watch.hit or watch.count, reached=bool(watch.hit))


def summary(outcomes: Sequence[OptimumOutcome], dataset: str, epochs: int, max_evals: int) -> str:
    rows = [["strategy", "runs", "reached", "mean evals", "median", "published"]]
    for name in dict.fromkeys(o.method for o in outcomes):
        runs = [o for o in outcomes if o.method == name]
        hits = np.array([o.evals for o in runs if o.reached])
        rows.append([name, str(len(runs)), f"{len(hits)}/{len(runs)}",
                     f"{hits.mean():.1f}" if len(hits) else f"> {max_evals}",
                     f"{np.median(hits):.0f}" if len(hits) else "-", PUBLISHED.get((name, dataset), "")])
    return text_table(rows, rule=True)


def register(sub: argparse._SubParsersAction) -> None:
    from nas.engine.tabular.nb201_table import DATASETS

    p = add_experiment(sub, __doc__, cmd_optimum)
    p.add_argument("--dataset", choices=list(DATASETS), default="cifar100", help="default cifar100")
    p.add_argument("--epochs", type=int, choices=(12, 200), default=200, help="the reward's epochs (default 200)")
    p.add_argument("--strategies", default="local,evolution,random",
                   help="comma-separated, default local,evolution,random")
    p.add_argument("--seeds", type=int, default=100, help="seeded runs per strategy (default 100)")
    p.add_argument("--max-evals", type=int, default=3000, help="evaluations before a run gives up (default 3000)")
    p.add_argument("-o", "--option", action="append", default=[], metavar="STRATEGY.KEY=VALUE",
                   help="a strategy option, e.g. -o local.init=10 (repeatable)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes (default: all cores)")


def cmd_optimum(args: argparse.Namespace) -> int:
    at_least(1, seeds=args.seeds, max_evals=args.max_evals, jobs=args.jobs)
    names = strategy_names(args.strategies)
    options = parse_strategy_options(args.option, strategies=names)
    check_strategy_options(names, options)
    t0 = time.perf_counter()
    outcomes = run_seeds(run_until, names, range(args.seeds), jobs=args.jobs,
                         options=options, dataset=args.dataset, epochs=args.epochs,
                         max_evals=args.max_evals)
    print(f"NAS-Bench-201 {args.dataset}: evaluations until the best {args.epochs}-epoch validation cell is evaluated "
          f"(reward: {args.epochs}-epoch validation accuracy, noise-free; 1 worker; at most {args.max_evals})")
    print(summary(outcomes, args.dataset, args.epochs, args.max_evals))
    print(f"{len(outcomes)} runs in {time.perf_counter() - t0:.1f} s real time")
    return 0
