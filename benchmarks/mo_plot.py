"""The figures of the multi-objective benchmarks (matplotlib, as :mod:`nas_benchmarks.plot`): the hypervolume
found against simulated time (log axis, a 95% confidence band of the mean), and measured fronts.

>>> from nas_benchmarks.mo_sim import MOOutcome
>>> band([MOOutcome("x", 0, curve=[(10.0, 50.0)]), MOOutcome("x", 1, curve=[(10.0, 70.0)])], np.array([1.0, 20.0]))
(array([ 0., 60.]), array([ 0.   , 19.6]))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .mo_sim import MOOutcome


def band(runs: Sequence[MOOutcome], grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The mean hypervolume (% of optimum) over ``runs`` at each time of ``grid``, and the half-width of
    its 95% confidence interval (1.96 standard errors; 0 for one run)."""
    from .mo_sim import hv_at

    values = np.array([hv_at(o, grid) for o in runs])
    half = 1.96 * values.std(axis=0, ddof=1) / np.sqrt(len(runs)) if len(runs) > 1 else np.zeros(len(grid))
    return values.mean(axis=0), half


def _pyplot():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_hypervolume(outcomes: Sequence[MOOutcome], path: Path, *, time_budget: float, title: str,
                     proxy: float) -> None:
    plt = _pyplot()
    start = min((o.curve[0][0] for o in outcomes if o.curve), default=1.0)
    grid = np.geomspace(max(start * 0.9, 1.0), time_budget, 300)
    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    for name in dict.fromkeys(o.method for o in outcomes):
        runs = [o for o in outcomes if o.method == name]
        mean, half = band(runs, grid)
        ax.plot(grid, mean, lw=1.8, label=f"{name} ({len(runs)} runs)")
        ax.fill_between(grid, mean - half, mean + half, alpha=0.18)
    ax.axhline(100.0, color="k", ls=":", lw=1, label="true front (all cells, 200 epochs)")
    ax.axhline(proxy, color="grey", ls="--", lw=1, label=f"front on 12-epoch accuracy, all cells ({proxy:.2f})")
    ax.set_xscale("log")
    ax.set_ylim(max(0.0, min(ax.get_ylim()[0], 80.0)), 100.5)
    ax.set_xlabel("simulated time (s, log scale)")
    ax.set_ylabel("hypervolume of the front found (% of the true front's)")
    ax.set_title(title, fontsize=8)
    ax.grid(alpha=0.3, which="both")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_fronts(points: Mapping[str, np.ndarray], fronts: Mapping[str, np.ndarray], path: Path, *,
                xlabel: str, ylabel: str, title: str, log_x: bool = True) -> None:
    """Every trial of each method (faint) and its front (a step line, markers), in one figure; ``points`` and
    ``fronts`` are (n, 2) arrays of (x, y) in the metrics' own units."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    for k, (name, pts) in enumerate(points.items()):
        color = f"C{k}"
        if len(pts):
            ax.scatter(pts[:, 0], pts[:, 1], s=12, alpha=0.3, color=color)
        front = fronts[name]
        if len(front):
            order = np.argsort(front[:, 0])
            ax.step(front[order, 0], front[order, 1], where="post", color=color, lw=1.6, marker="o",
                    label=f"{name} ({len(front)} on front / {len(pts)} trials)")
    if log_x:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
