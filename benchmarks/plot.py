"""The plot of ``nas bench strategies``: best-so-far accuracy against simulated time, one line per
strategy (the mean over seeds) with a band of one standard deviation.

>>> from nas_benchmarks.nb201_strategies import Outcome
>>> o = Outcome("x", 0, curve=[(100.0, 80.0), (300.0, 90.0)])
>>> curves_on_grid([o], np.array([0.0, 100.0, 300.0])).tolist()
[[nan, 80.0, 90.0]]
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .nb201_strategies import Outcome


def curves_on_grid(outcomes: Sequence[Outcome], grid: np.ndarray) -> np.ndarray:
    """Best-so-far (the incumbent's 200-epoch accuracy) of each run at each time of ``grid`` (NaN before
    the first result): an array (runs, len(grid))."""
    out = np.full((len(outcomes), len(grid)), np.nan)
    for k, o in enumerate(outcomes):
        if o.curve:
            times, values = np.array(o.curve).T
            idx = np.searchsorted(times, grid, side="right") - 1
            out[k] = np.where(idx >= 0, values[np.clip(idx, 0, None)], np.nan)
    return out


def plot(outcomes: Sequence[Outcome], path: Path, *, time_budget: float, title: str, optimum: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = np.linspace(0, time_budget, 301)
    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    lows = []
    for name in dict.fromkeys(o.strategy for o in outcomes):
        runs = [o for o in outcomes if o.strategy == name and o.curve]
        if not runs:
            continue
        values = curves_on_grid(runs, grid)
        with warnings.catch_warnings():  # the columns before any run's first result are all NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            mean, std = np.nanmean(values, axis=0), np.nanstd(values, axis=0)
        mean[np.isnan(values).mean(axis=0) > 0.5] = np.nan  # drawn once most runs have a result
        ax.plot(grid, mean, label=f"{name} ({len(runs)} runs)", lw=1.8)
        ax.fill_between(grid, mean - std, mean + std, alpha=0.12)
        lows.append(np.nanmin((mean - std)[grid >= 0.15 * time_budget]))
    ax.axhline(optimum, color="k", ls=":", lw=1, label=f"optimum {optimum:.2f}")
    if lows:
        ax.set_ylim(min(lows) - 0.3, optimum + 0.3)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("200-epoch validation accuracy of the best cell so far (%)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
