"""``nas bench inherit-search``: evolution with weight inheritance against evolution from scratch, accuracy vs time.

Regularized evolution with weight inheritance and ``--child-epochs`` per child against evolution from scratch with
``--epochs`` per trial: best validation accuracy against total training seconds, several seeds, both sides in one
command (Real et al. 2017's weight inheritance inside Real et al. 2019's aging evolution).

Both sides run the same :class:`~nas.strategies.evolution.RegularizedEvolution` (same seed, population and
tournament) through :class:`nas.engine.loop.SearchLoop` on the in-process executor with one
:class:`nas.train.runner.TrialRunner`, on the same NAS-Bench-201 cell space and data, one trial at a time
(training time is what is compared, so no parallelism blurs it). With inheritance the initial population trains
``--epochs`` (it has no parent); each child starts from its parent's checkpoint, kept by the executor, as the
platform inherits (:mod:`nas.train.inherit`: weights, and optimizer state where it fits) and trains
``--child-epochs``. Seconds are each trial's whole time on the worker (build, inheritance, training, checkpoint;
cost measurement off), from its result's start and end times; start-up (the trainer, the data) is paid once per
side, outside the figure.
The table gives each side's mean best accuracy at the end and its total training seconds, and the ratio;
``--plot FILE`` draws both best-so-far curves (mean over seeds, one standard deviation band).
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

import numpy as np
import torch

from nas.cli.common import file_arg
from nas.engine.inprocess import InProcessExecutor
from nas.engine.loop import SearchLoop
from nas.engine.protocol import BoundedCheckpoints
from nas.search_spaces.nb201 import NB201Space
from nas.strategies.evolution import RegularizedEvolution
from nas.train.data import Dataset, load_dataset
from nas.train.settings import TrainSettings

from . import add_experiment
from .harness import QUICK_WINS, Outcome, apply_quick, at_least, plot_bands, text_table, values_at, write_json


def evolve(executor: InProcessExecutor, space: NB201Space, *, budget: int, population: int, sample_size: int,
           inherit: bool, child_epochs: int, seed: int) -> list[tuple[float, float]]:
    """One search, one trial at a time: the (cumulative seconds, best accuracy so far) after each trial. The
    executor (its data already on the device) serves every search; each starts with no checkpoint kept."""
    evo = RegularizedEvolution(space, population=population, sample_size=sample_size, inherit=inherit,
                               child_epochs=child_epochs if inherit else None, seed=seed)
    executor.checkpoints = BoundedCheckpoints()
    seconds, best, curve = 0.0, 0.0, []
    for _, result in SearchLoop(evo, executor, budget=budget).run():
        seconds += (result.end_time or 0.0) - (result.start_time or 0.0)
        best = max(best, float(result.score or 0.0)) if result.ok else best
        curve.append((seconds, best))
    return curve


def bench_data(name: str, samples: int, seed: int) -> Dataset:
    if name == "images-32":
        from nas.train.synthetic import synthetic_images

        return Dataset.from_arrays(*synthetic_images(samples, seed=seed), seed=seed, name="images-32")
    if name == "digits":
        return load_dataset("digits", seed=seed)
    raise ValueError(f"--dataset must be digits or images-32, got {name!r}")


def plot(curves: dict[str, list[list[tuple[float, float]]]], path: str, title: str) -> None:
    """Best accuracy so far against seconds: per side the mean over seeds (drawn once every seed has a result,
    until the side's last run ends) with a band of one standard deviation."""
    grid = np.linspace(0, max(c[-1][0] for runs in curves.values() for c in runs), 401)
    bands = {}
    for name, runs in curves.items():
        values = values_at([Outcome(name, k, curve=c) for k, c in enumerate(runs)], grid)
        values[:, grid > max(c[-1][0] for c in runs)] = np.nan
        shown = ~np.isnan(values).any(axis=0)
        mean, std = np.full(len(grid), np.nan), np.full(len(grid), np.nan)
        mean[shown], std[shown] = values[:, shown].mean(0), values[:, shown].std(0)
        bands[f"{name} ({len(runs)} seeds)"] = (mean, std)
    plot_bands(grid, bands, path, xlabel="total training seconds", ylabel="best validation accuracy so far",
               title=title)


def handler(args: argparse.Namespace) -> int:
    at_least(1, seeds=args.seeds, budget=args.budget, population=args.population, sample_size=args.sample_size,
             epochs=args.epochs, child_epochs=args.child_epochs, threads=args.threads)
    at_least(100, samples=args.samples)
    if args.sample_size > args.population:
        raise ValueError(f"--sample-size must be <= --population, got {args.sample_size} > {args.population}")
    apply_quick(args, seeds=1, budget=4, population=2, sample_size=2, epochs=2)  # (after the checks)
    torch.set_num_threads(args.threads)
    data = bench_data(args.dataset, args.samples, 0)
    space = NB201Space(channels=args.channels)
    executor = InProcessExecutor(space, data, TrainSettings(epochs=args.epochs, device=args.device,
                                                            threads=args.threads, measure_costs=False))
    sides = {f"from scratch, {args.epochs} epochs": False, f"inherited, {args.child_epochs} epoch(s) per child": True}
    print(f"nas bench inherit-search: evolution (P={args.population}, S={args.sample_size}, {args.budget} trials) on "
          f"{data.name} ({len(data.x_train):,} train), NAS-Bench-201 cells ({args.channels} channels), {args.seeds} "
          f"seeds, {torch.get_num_threads()} threads", flush=True)
    curves: dict[str, list[list[tuple[float, float]]]] = {name: [] for name in sides}
    for seed in range(args.seeds):
        for name, inherit in sides.items():  # interleaved: a change in the machine's load hits both sides
            curves[name].append(evolve(executor, space, budget=args.budget, population=args.population,
                                       sample_size=args.sample_size, inherit=inherit,
                                       child_epochs=args.child_epochs, seed=seed))
    table = [["side", "best accuracy (mean ± sd)", "training seconds (mean)", "seconds / scratch's"]]
    base = statistics.fmean(c[-1][0] for c in curves[next(iter(sides))])
    summary: dict[str, Any] = {}
    for name, runs in curves.items():
        best = [c[-1][1] for c in runs]
        secs = statistics.fmean(c[-1][0] for c in runs)
        sd = statistics.stdev(best) if len(best) > 1 else 0.0
        table.append([name, f"{statistics.fmean(best):.3f} ± {sd:.3f}", f"{secs:.1f}", f"{secs / base:.2f}"])
        summary[name] = {"best": best, "seconds": [c[-1][0] for c in runs]}
    print(text_table(table, rule=True))
    if args.plot:
        plot(curves, args.plot, f"evolution on {data.name}: inheritance vs scratch ({args.seeds} seeds)")
        print(f"wrote {args.plot}")
    write_json(args.json, {"dataset": data.name, "summary": summary, "curves": curves})
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = add_experiment(sub, __doc__, handler)
    p.add_argument("--dataset", default="digits", help="digits (default) or images-32 (generated 32x32 images)")
    p.add_argument("--samples", type=int, default=600, help="images in images-32 (default 600)")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--budget", type=int, default=24, help="trials per search (default 24)")
    p.add_argument("--population", type=int, default=8)
    p.add_argument("--sample-size", type=int, default=3)
    p.add_argument("--epochs", type=int, default=4, help="epochs of a trial from scratch (default 4)")
    p.add_argument("--child-epochs", type=int, default=1, help="epochs of an inheriting child (default 1)")
    p.add_argument("--channels", type=int, default=8, help="stem channels of the cell network (default 8)")
    p.add_argument("--quick", action="store_true", help="1 seed, 4 trials, population 2, 2 epochs" + QUICK_WINS)
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--plot", metavar="FILE", help="the figure (PNG)")
    p.add_argument("--json", metavar="FILE", type=file_arg, help="also write the figures as JSON")
