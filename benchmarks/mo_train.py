"""``nas bench mo-train``: real multi-objective searches on this machine, accuracy against measured latency.

Each method runs one search (:func:`nas.search`) of the built-in macro CNN space on scikit-learn's ``digits``
(shipped, no download), with the objectives ``val_acc:max`` (validation accuracy after ``--epochs`` of real
PyTorch training on the CPU) and ``latency_ms:min`` (the median of ``--cost-repeats`` (25) timed batch-1 forward
passes after 2 warm-up passes, measured by the framework on the worker before the candidate trains,
:mod:`nas.train.costs`). Methods, all with the same seed and budget: multi-objective regularized evolution,
Optuna's NSGA-II, random search, and ParEGO's random scalarization around the REINFORCE controller.

What is printed: per method, the trials, the front's size, its hypervolume (moocore) against ONE reference
point for all methods (:func:`nas.core.front.reference_point` of every method's trials together: each
objective's worst less 10% of its range), the best accuracy and the lowest latency on the front, and the
search's wall time; then each front, member by member. The figure (``--out``, matplotlib) draws every trial
faintly and each method's front as a step line, in one plot. One run per method: the figures show what each
found here, not which method is better (that needs many seeds: ``nas bench strategies --objective``). The
latency of these small networks is a fraction of a millisecond, so load on a shared machine moves it
visibly; the figure says what this machine measured while it ran.

>>> rows = front_rows({"random": _frame([(0.9, 0.3), (0.8, 0.1), (0.7, 0.4)])})
>>> [(r[0], r[1], r[2]) for r in rows[1:]]
[('random', '0.9000', '0.300'), ('random', '0.8000', '0.100')]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nas.cli.common import path_arg
from nas.run.export import make_export_dir

from . import add_experiment
from .harness import QUICK_WINS, apply_quick, at_least, figure, text_table

OBJECTIVES = ("val_acc:max", "latency_ms:min")
#: method label -> (registered strategy, its options), sized for a budget of about 8 trials
METHODS: dict[str, tuple[str, dict[str, Any]]] = {
    "evolution": ("evolution", {"population": 4, "sample_size": 2}),
    "nsga2": ("optuna", {"sampler": "nsga2", "population": 4}),
    "random": ("random", {}),
    "parego-rl": ("rl", {}),
}


def _frame(points: Sequence[tuple[float, float]]) -> pd.DataFrame:
    """A results frame of COMPLETE trials with these (val_acc, latency_ms) (for the examples)."""
    return pd.DataFrame({"trial_id": range(len(points)), "state": "COMPLETE", "arch": [{}] * len(points),
                         "metrics": [{"val_acc": a, "latency_ms": lat, "params": 0} for a, lat in points]})


def run_method(method: str, *, budget: int, epochs: int, seed: int, executor: str, workers: int,
               run_dir: Path, cost_repeats: int = 25) -> tuple[pd.DataFrame, float]:
    """One real search of ``method``: its results frame and its wall time (s)."""
    import nas
    from nas.train.settings import TrainSettings

    name, options = METHODS[method]
    t0 = time.perf_counter()
    df = nas.search(space="macro", strategy=name, budget=budget, workers=workers, data="digits", executor=executor,
                    settings=TrainSettings(epochs=epochs, seed=seed, threads=1,
                                                                   cost_repeats=cost_repeats), strategy_options=options,
                    seed=seed, objectives=list(OBJECTIVES), run_dir=run_dir / method)
    return df, time.perf_counter() - t0


def values(df: pd.DataFrame) -> np.ndarray:
    """(val_acc, latency_ms) of the ranked trials (COMPLETE, both metrics finite)."""
    from nas.core.front import objective_frame

    return objective_frame(df, list(OBJECTIVES))[["val_acc", "latency_ms"]].to_numpy(float).reshape(-1, 2)


def summary_rows(frames: Mapping[str, pd.DataFrame], walls: Mapping[str, float]) -> list[list[str]]:
    from nas.core.front import hypervolume, pareto_front, reference_point

    every = np.vstack([values(df) for df in frames.values()])
    ref = reference_point(every * [1.0, -1.0])
    ref = [ref[0], -ref[1]]
    rows = [["method", "trials", "ranked", "front", "hypervolume", "best val_acc", "min latency_ms", "train s",
             "wall s"]]
    for m, df in frames.items():
        front = pareto_front(df, list(OBJECTIVES))
        pts = front[["val_acc", "latency_ms"]].to_numpy(float)
        hv = hypervolume(pts, ref, list(OBJECTIVES)) if len(pts) else 0.0
        rows.append([m, str(len(df)), str(len(values(df))), str(len(front)), f"{hv:.4f}",
                     f"{pts[:, 0].max():.4f}" if len(pts) else "-", f"{pts[:, 1].min():.3f}" if len(pts) else "-",
                     f"{_train_seconds(df):.1f}", f"{walls[m]:.1f}"])
    return rows


def _train_seconds(df: pd.DataFrame) -> float:
    """The summed training time of the trials (from their ``train_seconds``), without the search's start-up."""
    return float(sum(d.get("train_seconds") or 0.0 for d in df["metrics"] if isinstance(d, dict)))


def repeat_spread(frames: Mapping[str, pd.DataFrame]) -> tuple[int, float, float]:
    """How far apart this machine measured the SAME architecture's latency in different trials: the number of
    architectures measured more than once, and the median and largest max/min ratio among them.

    >>> repeat_spread({"a": _frame([(0.9, 0.2)]), "b": _frame([(0.9, 0.5)])})
    (1, 2.5, 2.5)
    """
    seen: dict[str, list[float]] = {}
    for df in frames.values():
        for arch, m in zip(df["arch"], df["metrics"], strict=True):
            if isinstance(m, dict) and m.get("latency_ms"):
                seen.setdefault(str(arch), []).append(float(m["latency_ms"]))
    ratios = [max(v) / min(v) for v in seen.values() if len(v) > 1]
    if not ratios:
        return 0, float("nan"), float("nan")
    return len(ratios), float(np.median(ratios)), float(max(ratios))


def front_rows(frames: Mapping[str, pd.DataFrame]) -> list[list[str]]:
    """Each method's front, member by member (best accuracy first)."""
    from nas.core.front import pareto_front

    rows = [["method", "val_acc", "latency_ms", "params", "trial", "architecture"]]
    for m, df in frames.items():
        for _, r in pareto_front(df, list(OBJECTIVES)).iterrows():
            arch = r["arch"] if isinstance(r["arch"], str) else ",".join(f"{k}={v}" for k, v in r["arch"].items())
            rows.append([m, f"{r['val_acc']:.4f}", f"{r['latency_ms']:.3f}", str(r["metrics"].get("params", "")),
                         str(r["trial_id"]), arch[:60]])
    return rows


def register(sub: argparse._SubParsersAction) -> None:
    p = add_experiment(sub, __doc__, cmd_mo_train)
    p.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated (default {','.join(METHODS)})")
    p.add_argument("--budget", type=int, default=8, help="trials per method (default 8)")
    p.add_argument("--epochs", type=int, default=2, help="training epochs per trial (default 2)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--executor", choices=["inprocess", "ray"], default="inprocess",
                   help="inprocess (default: one trial at a time, so no trial of ours disturbs another's latency) "
                        "or ray (trainer actors on a local cluster)")
    p.add_argument("--workers", type=int, default=1, help="workers (default 1)")
    p.add_argument("--cost-repeats", type=int, default=25,
                   help="timed forward passes whose median is a candidate's latency (default 25; the platform's 5 "
                        "move visibly under load)")
    p.add_argument("--quick", action="store_true", help="a smoke run: 3 trials of 1 epoch per method" + QUICK_WINS)
    p.add_argument("--out", default="bench-results/mo-train.png", type=path_arg, help="the figure")


def cmd_mo_train(args: argparse.Namespace) -> int:
    at_least(1, budget=args.budget, epochs=args.epochs, workers=args.workers, cost_repeats=args.cost_repeats)
    apply_quick(args, budget=3, epochs=1)  # (after the check: a bad value is refused even beside --quick)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for m in methods:
        if m not in METHODS:
            raise ValueError(f"unknown method {m!r}; known: {', '.join(METHODS)}")
    out = Path(args.out)
    if out.parent.exists() and not out.parent.is_dir():  # (made only once there is a figure to put in it)
        raise ValueError(f"cannot write {args.out!r}: {str(out.parent)!r} is a file, not a folder")
    frames, walls = {}, {}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="nas-mo-train-") as tmp:
        for m in methods:
            frames[m], walls[m] = run_method(m, budget=args.budget, epochs=args.epochs, seed=args.seed,
                                             executor=args.executor, workers=args.workers, run_dir=Path(tmp),
                                             cost_repeats=args.cost_repeats)
    title = (f"macro space on digits, {args.budget} trials x {args.epochs} epochs per method, seed {args.seed}, "
             f"{args.executor} executor ({args.workers} worker(s));\nlatency: median of {args.cost_repeats} batch-1 "
             f"forward passes, measured on the worker before training, on this machine")
    print(title)
    print(text_table(summary_rows(frames, walls), rule=True))
    print()
    print(text_table(front_rows(frames), rule=True))
    make_export_dir(out.parent)
    plot_fronts({m: values(df)[:, ::-1] for m, df in frames.items()},
                {m: _front_values(df) for m, df in frames.items()}, out,
                xlabel=f"latency_ms (batch 1, median of {args.cost_repeats}, measured on the worker; log scale)",
                ylabel=f"validation accuracy after {args.epochs} epoch(s)", title=title)
    n, median, worst = repeat_spread(frames)
    print(f"\nthe same architecture measured in several trials: {n} architecture(s), latency max/min "
          f"median {median:.2f}x, worst {worst:.2f}x (what load on this machine does to the latency axis)")
    print(f"wall s: each search from its call to its return (the first also pays the imports and the data's "
          f"first load); train s: the trials' own training time. {time.perf_counter() - t0:.1f} s in all; wrote {out}")
    return 0


def _front_values(df: pd.DataFrame) -> np.ndarray:
    from nas.core.front import pareto_front

    front = pareto_front(df, list(OBJECTIVES))
    return front[["latency_ms", "val_acc"]].to_numpy(float).reshape(-1, 2)


def plot_fronts(points: Mapping[str, np.ndarray], fronts: Mapping[str, np.ndarray], path: Path, *, xlabel: str,
                ylabel: str, title: str) -> None:
    """Every trial of each method (faint) and its front (a step line, markers), in one figure (log x axis);
    ``points`` and ``fronts`` are (n, 2) arrays of (x, y) in the metrics' own units."""
    with figure(path, xlabel=xlabel, ylabel=ylabel, title=title, log_x=True, small=True) as ax:
        for k, (name, pts) in enumerate(points.items()):
            if len(pts):
                ax.scatter(pts[:, 0], pts[:, 1], s=12, alpha=0.3, color=f"C{k}")
            front = fronts[name]
            if len(front):
                order = np.argsort(front[:, 0])
                ax.step(front[order, 0], front[order, 1], where="post", color=f"C{k}", lw=1.6, marker="o",
                        label=f"{name} ({len(front)} on front / {len(pts)} trials)")
