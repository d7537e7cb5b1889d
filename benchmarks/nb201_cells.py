"""``nas bench cells``: do our NAS-Bench-201 cells train like the benchmark's? A real-training sanity check.

A handful of cells chosen evenly across the table's range of 200-epoch CIFAR-10 accuracy (Dong & Yang,
"NAS-Bench-201", ICLR 2020; the table ships in ``nas/engine/tabular/data/nb201.csv``) are trained for a few epochs
with the ``nb201`` recipe (:mod:`nas.train.recipes`: the paper's Table 1, SGD + Nesterov, lr 0.1 cosine,
weight decay 5e-4, crop + flip) by our :class:`nas.train.runner.TrialRunner`, and the command prints the
Spearman rank correlation between our validation accuracies and the table's (12- and 200-epoch).

Data: by default a generated 32x32 10-class image task (:mod:`nas.train.synthetic`; no download), so the
check runs anywhere; ``--dataset cifar10:DIR`` (the python batches, where a user has them) trains on
CIFAR-10 itself, the benchmark's own data (``cifar100:DIR`` is compared with the table's CIFAR-100 column).
A few epochs on a synthetic task cannot reproduce 200 epochs on CIFAR: read the figure as a sanity check
(clearly positive: broken cells, e.g. all-pooling ones, rank low on both), not as a benchmark result.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
import warnings
from typing import Any

import numpy as np

from nas.cli.common import file_arg

from . import add_experiment
from .harness import at_least, text_table, write_json


def pick_cells(count: int, dataset: str = "cifar10") -> list[int]:
    """Table rows at evenly spaced quantiles (5% .. 100%) of the 200-epoch accuracy on ``dataset``."""
    from nas.engine.tabular.nb201_table import load_table

    acc = load_table().valid200[dataset]
    order = np.argsort(acc, kind="stable")
    picks = [int(order[round(q * (len(order) - 1))]) for q in np.linspace(0.05, 1.0, count)]
    return list(dict.fromkeys(picks))


def run_cells(rows: list[int], data: Any, settings: Any, table_dataset: str, seeds: int = 1) -> list[dict[str, Any]]:
    """Train each table row's cell ``seeds`` times (trial ids, hence torch seeds, differ); our mean validation
    accuracy (and each seed's) beside the table's."""
    from nas.core.types import Trial
    from nas.engine.tabular.nb201_table import load_table
    from nas.search_spaces.nb201 import NB201Space
    from nas.train.runner import TrialRunner

    table, space = load_table(), NB201Space()
    trainer = TrialRunner(data, settings)
    out = []
    for i, row in enumerate(rows):
        arch = space.parse(table.arch_str[row])
        t0 = time.perf_counter()
        accs, params = [], 0
        for k in range(seeds):
            result, _ = trainer.run(Trial(k * len(rows) + i, arch), space, None)
            if not result.ok:
                raise RuntimeError(f"cell {table.arch_str[row]} failed to train: {result.error}")
            accs.append(float(result.score or 0.0))
            params = int(result.metrics["params"])
        out.append({"index": row, "arch": table.arch_str[row], "ours": sum(accs) / seeds, "ours_seeds": accs,
                    "table12": float(table.valid12[table_dataset][row]) / 100,
                    "table200": float(table.valid200[table_dataset][row]) / 100,
                    "params": params, "seconds": time.perf_counter() - t0})
    return out


def seed_noise(results: list[dict[str, Any]]) -> str | None:
    """With 2+ seeds per cell: why the ranks are noise (the cells' means are apart by less than 2 standard errors
    of a difference, from the pooled spread between seeds), or None.

    >>> seed_noise([{"ours": 0.5, "ours_seeds": [0.4, 0.6]}, {"ours": 0.55, "ours_seeds": [0.45, 0.65]}])[:40]
    "the cells' means are apart by less than "
    >>> seed_noise([{"ours": 0.3, "ours_seeds": [0.29, 0.31]}, {"ours": 0.8, "ours_seeds": [0.79, 0.81]}]) is None
    True
    """
    seeds = len(results[0]["ours_seeds"])
    if seeds < 2:
        return None
    var = sum(statistics.variance(r["ours_seeds"]) for r in results) / len(results)
    means = [r["ours"] for r in results]
    se_diff = math.sqrt(2 * var / seeds)
    if max(means) - min(means) < 2 * se_diff:
        return (f"the cells' means are apart by less than the seeds' noise (pooled sd {math.sqrt(var):.3f} over "
                f"{seeds} seeds); the ranks are noise")
    return None


def judge(accs: list[float], *, n_val: int, classes: int) -> str | None:
    """Why a rank correlation over ``accs`` (validation accuracies on ``n_val`` images) means nothing, or None:
    every cell at chance level, every cell saturated (>= 0.95), or the best and worst cell apart by less than
    the validation set's binomial noise (2 standard errors of a difference).

    >>> judge([0.10, 0.11, 0.09], n_val=750, classes=10)[:20]
    'every cell at chance'
    >>> judge([0.96, 0.99, 0.97], n_val=750, classes=10)[:18]
    'every cell >= 0.95'
    >>> judge([0.40, 0.62, 0.81], n_val=750, classes=10) is None
    True
    """
    chance = 1 / classes
    if max(accs) <= chance + 2 * math.sqrt(chance * (1 - chance) / n_val):
        return f"every cell at chance level ({chance:.2f}): too few steps to rank anything; raise --epochs or --samples"
    if min(accs) >= 0.95:
        return "every cell >= 0.95: the task saturated and the ranks are noise; raise --noise or lower --epochs"
    p = sum(accs) / len(accs)
    if max(accs) - min(accs) < 2 * math.sqrt(2 * p * (1 - p) / n_val):
        return f"the cells are within the validation set's noise of each other ({n_val} images); the ranks are noise"
    return None


def handler(args: argparse.Namespace) -> int:
    import scipy.stats
    import torch

    from nas.train.data import load_dataset
    from nas.train.recipes import recipe_settings
    from nas.train.settings import TrainSettings
    from nas.train.synthetic import synthetic_images

    at_least(3, cells=args.cells)
    at_least(1, epochs=args.epochs)
    at_least(100, samples=args.samples)
    at_least(1, seeds=args.seeds)
    if args.threads is not None:
        at_least(1, threads=args.threads)
        torch.set_num_threads(args.threads)
    table_dataset = "cifar100" if args.dataset.startswith("cifar100:") else "cifar10"
    if args.dataset == "synthetic":
        from nas.train.data import Dataset

        if not args.noise >= 0:
            raise ValueError(f"--noise must be >= 0, got {args.noise}")
        data = Dataset.from_arrays(*synthetic_images(args.samples, seed=args.seed, noise=args.noise), seed=args.seed,
                                   name=f"synthetic 32x32 images (noise {args.noise:g})")
    elif args.dataset.startswith(("cifar10:", "cifar100:")):
        data = load_dataset(args.dataset, seed=args.seed)
    else:
        raise ValueError(f"--dataset must be synthetic, cifar10:DIR or cifar100:DIR, got {args.dataset!r}")
    recipe = recipe_settings(args.recipe)
    recipe.update(epochs=args.epochs, seed=args.seed, device=args.device)
    if args.batch_size is not None:
        recipe["batch_size"] = args.batch_size
    settings = TrainSettings(**recipe)
    rows = pick_cells(args.cells, table_dataset)
    print(f"nas bench cells: {len(rows)} NAS-Bench-201 cells across the table's {table_dataset} accuracy range, "
          f"recipe {args.recipe} for {settings.epochs} epochs (batch {settings.batch_size}, lr {settings.lr:g} "
          f"cosine), on {data.name} ({len(data.x_train):,} train / {len(data.x_val):,} val); "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)
    results = run_cells(rows, data, settings, table_dataset, seeds=args.seeds)
    table = [["index", "cell", "params", "table 12-ep", "table 200-ep", "ours" + (" (mean)" if args.seeds > 1 else ""),
              "by seed", "seconds"]]
    table += [[str(r["index"]), r["arch"], f"{r['params']:,}", f"{r['table12']:.3f}", f"{r['table200']:.3f}",
               f"{r['ours']:.3f}", " ".join(f"{a:.2f}" for a in r["ours_seeds"]), f"{r['seconds']:.1f}"]
              for r in results]
    print(text_table(table))
    ours = [r["ours"] for r in results]
    with warnings.catch_warnings():  # constant input: said below in words
        warnings.simplefilter("ignore")
        rho12 = scipy.stats.spearmanr(ours, [r["table12"] for r in results])
        rho200 = scipy.stats.spearmanr(ours, [r["table200"] for r in results])
    verdict = judge(ours, n_val=len(data.x_val), classes=data.task.num_classes) or seed_noise(results)
    steps = -(-len(data.x_train) // settings.batch_size) * settings.epochs
    if len(set(ours)) == 1:
        print(f"Spearman rank correlation undefined: every cell reached {ours[0]:.3f} (the task is too easy or too "
              f"hard for {settings.epochs} epochs; change --samples or --epochs)")
    else:
        print(f"Spearman rank correlation, ours vs the table: {float(rho200.statistic):+.3f} with the 200-epoch "
              f"accuracy (p={float(rho200.pvalue):.3f}), {float(rho12.statistic):+.3f} with the 12-epoch "
              f"(p={float(rho12.pvalue):.3f}); {len(results)} cells")
    print(f"{steps:,} SGD steps per cell (the table's accuracies took thousands: 12 and 200 epochs of CIFAR at "
          f"batch 256); {verdict or 'the cells are apart by more than the validation noise'}")
    write_json(args.json, {"dataset": data.name, "epochs": settings.epochs, "steps": steps, "verdict": verdict,
                           "cells": results, "spearman_200": float(rho200.statistic),
                           "spearman_12": float(rho12.statistic)})
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = add_experiment(sub, __doc__, handler)
    p.add_argument("--cells", type=int, default=6, help="cells to train, across the accuracy range (default 6)")
    p.add_argument("--epochs", type=int, default=2, help="epochs per cell (default 2)")
    p.add_argument("--dataset", default="synthetic", help="synthetic (default: generated 32x32 images), "
                   "cifar10:DIR or cifar100:DIR")
    p.add_argument("--samples", type=int, default=3000, help="images in the synthetic task (default 3000)")
    p.add_argument("--noise", type=float, default=70.0, help="pixel noise of the synthetic task (default 70; "
                   "higher is harder)")
    p.add_argument("--recipe", default="nb201", help="training recipe (default nb201; see `nas recipes`)")
    p.add_argument("--batch-size", type=int, help="override the recipe's batch size")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's own)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seeds", type=int, default=1, help="trainings per cell, averaged; 2+ also says whether the "
                   "cells differ by more than the seeds do (default 1)")
    p.add_argument("--json", metavar="FILE", type=file_arg, help="also write the figures as JSON")
