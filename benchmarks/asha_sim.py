"""``nas bench asha``: evolution with and without ASHA or Hyperband on the simulated NAS-Bench-201 (CIFAR-10).

Every method is regularized evolution (Real et al. 2019; population 10, tournament 3, as the
NAS-Bench-201 protocol) on :class:`nas.engine.simulated.SimulatedExecutor` over the table's two schedules
(:class:`nas.engine.tabular.nb201_table.NB201Fidelities`), through :class:`nas.engine.loop.SearchLoop`
(:func:`.harness.simulated_search`), side by side on the same seeds, workers and simulated time budget:

- ``evolution 200``: evolution alone, every candidate trained the 200-epoch schedule (the baseline);
- ``evolution 12``: evolution alone on the 12-epoch proxy (the NAS-Bench-201 paper's protocol);
- ``ASHA stopping`` / ``ASHA promotion``: evolution + ASHA (Li et al., MLSys 2020) with two rungs, 12 and
  200 epochs (``levels=[12, 200]``, eta 3). A candidate that goes past the 12-epoch rung (continued, or
  paused and promoted) trains the 200-epoch schedule from scratch, charged its FULL time: the table's
  12-epoch run does not continue into the 200-epoch one;
- ``HB promotion``: evolution + Hyperband (Li et al., JMLR 2018) as brackets of ASHA promotion over the same
  rungs: a trial is drawn into the bracket that starts at 12 epochs or the one that trains 200 at once;
- ``... (mixed)``: the same with evolution as it was before it kept scores per fidelity (:class:`MixedEvolution`:
  a 12-epoch and a 200-epoch score compared as they are, a promoted trial's longer result ignored), to show what
  comparing like with like (:mod:`nas.strategies.fidelity`) changes.

The median-stopping rule (``median``) is not a method here: it decides on per-epoch reports, and the table
answers at two fidelities only, so on the simulated executor it never sees a report to stop at.

Each method's pick at time t is the cell it would return if stopped then: the best result at the highest
fidelity any of its trials has reached by t (200 epochs once one has, else 12). It is judged by that cell's
200-epoch validation accuracy (the mean over the table's seeds). The table gives, per method, the mean over
seeds of that accuracy at fractions of the budget and at its end, and the simulated time the mean curve
takes to reach the baseline's final accuracy (with the ratio against the baseline's own time), and the p-value of a
paired t-test (same seeds) of each method's final accuracy against the baseline's (scipy).

>>> out = run_method("ASHA promotion", 0, time_budget=6_000, workers=2)
>>> out.trials > out.full > 0, 80 < out.curve[-1][1] < 92
(True, True)
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from nas.engine.interfaces import Callback, LoopStatus
from nas.strategies.evolution import Member, RegularizedEvolution

from . import add_experiment
from .harness import PROTOCOL_OPTIONS, QUICK_WINS, Outcome, check_runs, run_seeds, simulated_search, values_at

#: method -> (epochs per candidate, scheduler or None, its variant, evolution keeps scores per fidelity)
METHODS: dict[str, tuple[int, str | None, str | None, bool]] = {
    "evolution 200": (200, None, None, True), "evolution 12": (12, None, None, True),
    "ASHA stopping": (200, "asha", "stopping", True), "ASHA promotion": (200, "asha", "promotion", True),
    "HB promotion": (200, "hyperband", "promotion", True),
    "ASHA prom. (mixed)": (200, "asha", "promotion", False), "HB prom. (mixed)": (200, "hyperband", "promotion", False),
}
BASELINE = "evolution 200"
LEVELS = [12, 200]
FRACTIONS = (0.1, 0.25, 0.5, 1.0)


@dataclasses.dataclass
class AshaOutcome(Outcome):
    """One seeded search (``trials``: candidates that ended within the budget); ``curve``: (time, valid-200 of
    the pick) on change."""

    full: int = 0  # of the trials, trained the 200-epoch schedule
    work: float = 0.0  # simulated training seconds charged


class _Ended(Callback):
    """Every result as the loop records it (a promoted trial's twice): (end time, epochs, score, table row),
    and the trials that ended."""

    def __init__(self) -> None:
        self.ended: list[tuple[float, int, float, int]] = []
        self.trials: set[int] = set()

    def on_result(self, status: LoopStatus, trial: Any, result: Any) -> None:
        if result.ok and result.end_time <= (status.time_budget or np.inf):
            self.ended.append((result.end_time, result.epoch, result.score, result.metrics["index"]))
            self.trials.add(trial.trial_id)


def pick_curve(ended: Sequence[tuple[float, int, float, int]], valid200: np.ndarray,
               time_budget: float) -> list[tuple[float, float]]:
    """(time, valid-200 of the pick) each time the pick changes: the best result at the highest fidelity
    reached so far, among results ended within ``time_budget``.

    >>> pick_curve([(1, 12, 0.8, 0), (2, 12, 0.7, 1), (3, 200, 0.6, 2), (4, 12, 0.9, 3)], np.arange(4.0), 9)
    [(1.0, 0.0), (3.0, 2.0)]
    """
    curve: list[tuple[float, float]] = []
    top, best = 0, -np.inf
    for end, epoch, score, index in sorted(ended):
        if end > time_budget or epoch < top or (epoch == top and score <= best):
            continue
        top, best = epoch, score
        value = float(valid200[index])
        if not curve or curve[-1][1] != value:
            curve.append((float(end), value))
    return curve


class MixedEvolution(RegularizedEvolution):
    """Regularized evolution as it was before it kept scores per fidelity (for comparison only): the tournament
    compares each member's first score, whatever its fidelity, and a promoted trial's longer result is ignored."""

    def _tournament(self) -> Member:
        picks = self.rng.choice(len(self.population), size=min(self.sample_size, len(self.population)), replace=False)
        return max((self.population[int(i)] for i in picks), key=lambda m: m.score)

    def update(self, trial: Any, result: Any) -> None:
        pass


def run_method(method: str, seed: int, *, time_budget: float = 50_000.0, workers: int = 4,
               eta: float = 3.0) -> AshaOutcome:
    """One seeded search of ``method`` (a key of :data:`METHODS`) within ``time_budget`` simulated seconds."""
    from nas.core.scheduler import make_scheduler
    from nas.engine.tabular.nb201_table import NB201Fidelities
    from nas.search_spaces.nb201 import NB201Space

    epochs, name, variant, aware = METHODS[method]
    bench = NB201Fidelities("cifar10")
    scheduler = None
    if name is not None:
        scheduler = make_scheduler(name, max_epochs=200, seed=seed,
                                   options={"levels": LEVELS, "variant": variant, "eta": eta})
    strategy: Any = "evolution" if aware else MixedEvolution(NB201Space(), seed=seed, **PROTOCOL_OPTIONS["evolution"])
    ended = _Ended()
    loop, executor = simulated_search(strategy, bench, seed=seed, workers=workers, time_budget=time_budget,
                                      options=PROTOCOL_OPTIONS["evolution"], epochs=epochs, scheduler=scheduler,
                                      callbacks=[ended])
    return AshaOutcome(method, seed, trials=len(ended.trials), strategy_seconds=loop.strategy_seconds,
                       full=sum(e[1] == 200 for e in ended.ended), work=executor.work,
                       curve=pick_curve(ended.ended, bench.table.valid200["cifar10"], time_budget))


def mean_curve(outcomes: Sequence[AshaOutcome], grid: np.ndarray) -> np.ndarray:
    """The mean over runs of the pick's valid-200 at each time of ``grid`` (NaN before any run's first result)."""
    with warnings.catch_warnings():  # the columns before every run's first result are all NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(values_at(outcomes, grid), axis=0)


def time_to_reach(grid: np.ndarray, curve: np.ndarray, target: float) -> float:
    """The first grid time where the mean curve reaches ``target`` (inf if never)."""
    hits = np.nonzero(curve >= target - 1e-9)[0]
    return float(grid[hits[0]]) if len(hits) else float("inf")


def compare(seeds: Sequence[int], *, time_budget: float = 50_000.0, workers: int = 4, jobs: int = 1,
            eta: float = 3.0) -> tuple[dict[str, Any], list[AshaOutcome]]:
    """Every method on every seed; the summary rows (by method) and the outcomes."""
    outcomes: list[AshaOutcome] = run_seeds(run_method, list(METHODS), seeds, jobs=jobs, time_budget=time_budget,
                                            workers=workers, eta=eta)
    grid = np.linspace(0.0, time_budget, 401)
    by_method = {m: [o for o in outcomes if o.method == m] for m in METHODS}
    curves = {m: mean_curve(runs, grid) for m, runs in by_method.items()}
    target = float(curves[BASELINE][-1])
    base_time = time_to_reach(grid, curves[BASELINE], target)
    rows: dict[str, Any] = {}
    base = np.array([o.curve[-1][1] if o.curve else np.nan for o in by_method[BASELINE]])
    for m, runs in by_method.items():
        final = np.array([o.curve[-1][1] if o.curve else np.nan for o in runs])
        reach = time_to_reach(grid, curves[m], target)
        rows[m] = {"at": [float(curves[m][int(round(f * (len(grid) - 1)))]) for f in FRACTIONS],
                   "final": float(np.nanmean(final)), "std": float(np.nanstd(final)),
                   "trials": float(np.mean([o.trials for o in runs])),
                   "full": float(np.mean([o.full for o in runs])), "reach": reach,
                   "speedup": base_time / reach if np.isfinite(reach) and reach > 0 else float("nan"),
                   "p": paired_p(final, base)}
    return {"target": target, "rows": rows}, outcomes


def paired_p(a: np.ndarray, b: np.ndarray) -> float:
    """The two-sided p-value of a paired t-test of ``a`` against ``b`` (runs on the same seeds); NaN where it is
    undefined (fewer than two pairs, or no difference at all).

    >>> round(paired_p(np.array([1.0, 2.0, 3.5]), np.array([0.0, 1.0, 2.0])), 3), paired_p(np.ones(3), np.ones(3))
    (0.02, nan)
    """
    from scipy.stats import ttest_rel

    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 2 or np.all(a[ok] == b[ok]):
        return float("nan")
    return float(ttest_rel(a[ok], b[ok]).pvalue)


def format_table(summary: dict[str, Any], time_budget: float) -> str:
    at = " ".join(f"{f * time_budget:>8.0f}s" for f in FRACTIONS)
    head = (f"{'method':18s} {'trials':>7s} {'200-ep':>7s} {at}   {'final +- std':>13s}   "
            f"{'time to ' + format(summary['target'], '.2f'):>14s}  {'vs ' + BASELINE:>17s}  {'p vs it':>8s}")
    over = f"{'':34s}{'valid-200 (%) of the pick, mean over seeds, at':^{9 * len(FRACTIONS) + 1}s}"
    lines = [over, head, "-" * len(head)]
    for m, r in summary["rows"].items():
        cells = " ".join(f"{v:9.2f}" if np.isfinite(v) else f"{'-':>9s}" for v in r["at"])
        reach = f"{r['reach']:.0f} s" if np.isfinite(r["reach"]) else "never"
        speed = f"{r['speedup']:.2f}x" if np.isfinite(r["speedup"]) else "-"
        p = f"{r['p']:.2g}" if np.isfinite(r["p"]) else "-"
        lines.append(f"{m:18s} {r['trials']:7.1f} {r['full']:7.1f} {cells}   {r['final']:6.2f} +- {r['std']:4.2f}   "
                     f"{reach:>14s}  {speed:>17s}  {p:>8s}")
    return "\n".join(lines)


def register(sub: argparse._SubParsersAction) -> None:
    p = add_experiment(sub, __doc__, cmd_asha)
    p.add_argument("--seeds", type=int, default=100, help="seeded runs per method (default 100)")
    p.add_argument("--time-budget", type=float, default=50_000.0, help="simulated seconds (default 50000)")
    p.add_argument("--workers", type=int, default=4, help="simulated workers (default 4)")
    p.add_argument("--eta", type=float, default=3.0, help="ASHA's reduction factor (default 3)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes (default: all cores)")
    p.add_argument("--quick", action="store_true", help="3 seeds, 10000 simulated s: a smoke test" + QUICK_WINS)


def cmd_asha(args: argparse.Namespace) -> int:
    check_runs(args, quick=(3, 10_000.0))
    from nas.schedulers.asha import ASHA

    ASHA(max_epochs=200, levels=LEVELS, eta=args.eta)  # a bad eta: its one-line error before any run
    t0 = time.perf_counter()
    summary, outcomes = compare(range(args.seeds), time_budget=args.time_budget, workers=args.workers,
                                jobs=args.jobs, eta=args.eta)
    print(f"NAS-Bench-201 cifar10: evolution (population 10, tournament 3) alone and with ASHA or Hyperband (rungs 12, "
          f"200 epochs, eta {args.eta:g}); {args.workers} workers, {args.time_budget:g} simulated s, {args.seeds} seeds"
          "\n(median stopping: not run; it needs per-epoch reports, and the table answers at 12 and 200 epochs only)")
    print(format_table(summary, args.time_budget))
    print(f"{len(outcomes)} runs in {time.perf_counter() - t0:.1f} s real time")
    return 0


__all__ = ["METHODS", "AshaOutcome", "MixedEvolution", "compare", "format_table", "paired_p", "pick_curve",
           "run_method"]
