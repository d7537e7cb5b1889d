"""``nas bench importance``: the report's decision importance (fANOVA, our forest) against Optuna's default forest.

The report ranks a run's decisions with Optuna's fANOVA evaluator on a smaller forest than Optuna's default
(:data:`nas.monitor.importance.FANOVA` against 64 trees of depth 64). Each row is one made-up run of N trials of D
decisions with ``--choices`` options each, whose score is a planted sum: decision ``d0`` weighs 1, ``d1`` 1/2,
``d2`` 1/4 (and ``d0`` x ``d1`` interact), every other decision nothing, plus Gaussian noise of ``--noise``. Both
forests rank the same trials in this process, one after the other (which goes first alternates by seed); the CPU
time of each (``time.process_time``; each builds the same study), their ratio, how well the two agree (the
largest difference of one decision's importance, whether they rank the same three decisions first in the same
order) and whether each puts the three planted decisions on top are printed, never asserted. ``--run RUN``
adds a row of a real run directory: its COMPLETE trials and decisions, as ``nas report`` reads them.

>>> row = measure(60, 4, choices=3, noise=0.05, seed=0)
>>> sorted(row)[:3], row["ours_top"]
(['default_s', 'default_top', 'max_diff'], True)
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from . import add_experiment
from .harness import at_least, items, text_table


def planted(trials: int, decisions: int, *, choices: int, noise: float, seed: int) -> tuple[pd.DataFrame,
                                                                                               pd.DataFrame]:
    """A made-up run: (results with ``state`` and ``score``, its decisions, a column each)."""
    rng = np.random.default_rng(seed)
    dec = pd.DataFrame({f"d{i}": rng.integers(0, choices, trials) for i in range(decisions)})
    level = dec.to_numpy(dtype=float) / max(choices - 1, 1)
    weights = np.zeros(decisions)
    weights[:3] = [1.0, 0.5, 0.25][:decisions]
    score = level @ weights + rng.normal(0.0, noise, trials)
    if decisions > 1:
        score += 0.5 * level[:, 0] * level[:, 1]
    return pd.DataFrame({"state": ["COMPLETE"] * trials, "score": score}), dec


def compare(df: pd.DataFrame, dec: pd.DataFrame, *, seed: int, truth: list[str] | None = None) -> dict[str, Any]:
    """Both forests on one run: their CPU seconds, the ratio, agreement, and (``truth``) whether each ranks the
    planted decisions on top."""
    from nas.monitor.importance import FANOVA, decision_importance

    sides: dict[str, Mapping[str, int]] = {"ours": FANOVA, "default": {}}
    order = list(sides) if seed % 2 == 0 else list(sides)[::-1]
    out: dict[str, Any] = {}
    imp: dict[str, dict[str, float]] = {}
    for side in order:
        t0 = time.process_time()
        imp[side] = decision_importance(df, dec, seed=seed, forest=sides[side])
        out[f"{side}_s"] = time.process_time() - t0
    names = sorted(imp["default"])
    a, b = [imp["ours"].get(n, 0.0) for n in names], [imp["default"].get(n, 0.0) for n in names]
    out["max_diff"] = max((abs(x - y) for x, y in zip(a, b, strict=True)), default=0.0)
    ranked = {side: sorted(imp[side], key=imp[side].__getitem__, reverse=True) for side in sides}
    out["same_top3"] = ranked["ours"][:3] == ranked["default"][:3]
    for side in sides:
        out[f"{side}_top"] = None if truth is None else set(ranked[side][:len(truth)]) == set(truth)
    return out


def measure(trials: int, decisions: int, *, choices: int, noise: float, seed: int) -> dict[str, Any]:
    """:func:`compare` on a :func:`planted` run."""
    df, dec = planted(trials, decisions, choices=choices, noise=noise, seed=seed)
    return compare(df, dec, seed=seed, truth=[f"d{i}" for i in range(min(3, decisions))])


def from_run(run_dir: str, seed: int) -> dict[str, Any]:
    """:func:`compare` on a run directory's trials (the report's reading of them), with its ``label``."""
    from nas.monitor.figures import decisions_frame
    from nas.run.reader import load_run, registered_space

    cfg, df = load_run(run_dir)
    space = registered_space(cfg)
    dec = decisions_frame(df, space.parse if space is not None else None)
    done = int((df.state == "COMPLETE").sum())
    return {"label": f"{run_dir} ({done:,} COMPLETE x {dec.shape[1]})", **compare(df, dec, seed=seed)}


def register(sub: argparse._SubParsersAction) -> None:
    p = add_experiment(sub, __doc__, cmd_importance)
    p.add_argument("--sizes", default="400x6,1000x20,1000x50",
                   help="made-up runs, TRIALSxDECISIONS, comma-separated (default 400x6,1000x20,1000x50)")
    p.add_argument("--choices", type=int, default=5, help="options of each decision (default 5)")
    p.add_argument("--noise", type=float, default=0.1, help="the score's Gaussian noise (default 0.1)")
    p.add_argument("--seeds", type=int, default=2, help="made-up runs of each size (default 2)")
    p.add_argument("--run", action="append", default=[], metavar="RUN_DIR", help="a run directory's row too")


def _size(text: str) -> tuple[int, int]:
    parts = text.lower().split("x")
    if len(parts) != 2 or not all(p.isdigit() for p in parts) or int(parts[0]) < 2 or int(parts[1]) < 1:
        raise ValueError(f"--sizes takes TRIALSxDECISIONS pairs of at least 2 trials and 1 decision, e.g. 1000x50; "
                         f"got {text!r}")
    return int(parts[0]), int(parts[1])


def cmd_importance(args: argparse.Namespace) -> int:
    sizes = [_size(s) for s in items(args.sizes, "--sizes")]
    at_least(2, choices=args.choices)
    at_least(1, seeds=args.seeds)
    if not 0 <= args.noise < float("inf"):
        raise ValueError(f"--noise must be a finite number >= 0, got {args.noise!r}")
    rows = [["run", "seed", "ours CPU s", "Optuna's default CPU s", "default / ours", "max diff", "same top 3",
             "planted on top: ours", "default"]]
    work: list[tuple[str, int, Callable[[], dict[str, Any]]]] = [
        (f"{n:,} trials x {d}", seed, functools.partial(measure, n, d, choices=args.choices, noise=args.noise,
                                                         seed=seed)) for n, d in sizes for seed in range(args.seeds)]
    work += [(run, 0, functools.partial(from_run, run, 0)) for run in args.run]
    for name, seed, fn in work:
        r = fn()
        name = r.get("label", name)
        ratio = r["default_s"] / r["ours_s"] if r["ours_s"] > 0 else float("nan")
        rows.append([name, str(seed), f"{r['ours_s']:.2f}", f"{r['default_s']:.2f}", f"{ratio:.1f}x",
                     f"{r['max_diff']:.3f}", _yes(r["same_top3"]), _yes(r["ours_top"]), _yes(r["default_top"])])
    print(text_table(rows, rule=True))
    return 0


def _yes(value: bool | None) -> str:
    return "-" if value is None else "yes" if value else "no"
