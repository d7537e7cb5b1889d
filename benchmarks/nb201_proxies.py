"""``nas bench proxies``: zero-cost proxies ranked against NAS-Bench-201's 200-epoch accuracies, beside params.

For a random sample of cells (``--sample``, default 1,000; ``all``: the 15,625), each proxy of
:mod:`nas.train.proxies` is computed at initialisation on the cell built by ``NB201Space(channels=C,
cells_per_stage=N)`` for 32x32 RGB inputs and 10 classes (defaults: C = 16, the paper's width, and N = 1 cell per
stage instead of the paper's 5, so that 1,000 cells take minutes on two cores), each model seeded by its index.
The proxies that need data see one minibatch of ``--batch`` (32) generated CIFAR-shaped images
(:mod:`nas.train.synthetic`: nothing is downloaded); the published figures were computed on CIFAR batches, with
the full network. Then, per dataset, Spearman's rho and Kendall's tau of each proxy against the table's 200-epoch
validation accuracy (mean over seeds; scipy). ``vote`` is the mean rank of synflow, jacob_cov and snip (Abdelfattah
et al. 2021's vote of three, as a rank average); ``params`` is the baseline a proxy must beat.

Seconds per cell are printed apart for each pass (synflow; snip and grad_norm share one; jacob_cov and naswot
share one), measured with one torch thread per process. Values are cached in ``--out`` and reused; ``nas bench
strategies -o STRATEGY.warmup=synflow:M:K`` reads its warm-up's proxy from this cache (:func:`proxy_column`).

>>> rows = score_cells([0, 1], proxies=["synflow", "params"], channels=4, cells_per_stage=1, batch=4)
>>> [sorted(k for k in r if not k.startswith("sec_")) for r in rows][0], rows[1]["params"] > rows[0]["params"]
(['index', 'params', 'synflow'], True)
"""

from __future__ import annotations

import argparse
import functools
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nas.cli.common import file_arg, folder_arg
from nas.run.export import make_export_dir

from . import add_experiment
from .harness import pool_map, text_table, write_json

DATASETS = ("cifar10", "cifar100", "imagenet16")
PASSES = {"synflow": ("synflow",), "loss": ("snip", "grad_norm"), "activations": ("jacob_cov", "naswot"),
          "params": ("params",)}
VOTE = ("synflow", "jacob_cov", "snip")
#: published Spearman rho over all 15,625 cells (Abdelfattah et al. 2021, "Zero-Cost Proxies for Lightweight NAS"),
#: as quoted in issue 22; datasets without a quoted figure are left out
PUBLISHED = {"synflow": {"cifar10": 0.74, "cifar100": 0.76, "imagenet16": 0.75}, "vote": {"cifar10": 0.82},
             "params": {"cifar100": 0.735}}


def cache_path(out: str | os.PathLike[str], channels: int, cells_per_stage: int, batch: int) -> Path:
    return Path(out) / f"nb201-proxies-c{channels}-n{cells_per_stage}-b{batch}.csv"


def score_cells(indices: Sequence[int], *, proxies: Sequence[str], channels: int = 16, cells_per_stage: int = 1,
                batch: int = 32) -> list[dict[str, Any]]:
    """The proxies of NAS-Bench-201 cells ``indices``, one row each, with the seconds of each pass."""
    import torch

    from nas.core.space import Task
    from nas.engine.tabular.nb201_table import load_table
    from nas.search_spaces.nb201 import NB201Space
    from nas.train.proxies import cifar_like_batch, compute

    table, space, task = load_table(), NB201Space(channels=channels, cells_per_stage=cells_per_stage), \
        Task((3, 32, 32), 10)
    x, y = cifar_like_batch(batch, seed=0)  # (as a simulated search's warm-up sees them)
    rows = []
    for index in indices:
        torch.manual_seed(int(index))
        model = space.build(space.parse(table.arch_str[index]), task)
        row: dict[str, Any] = {"index": int(index)}
        for name, members in PASSES.items():
            wanted = [p for p in members if p in proxies]
            if wanted:
                t0 = time.perf_counter()
                row.update(compute(model, x, y, names=wanted))
                row[f"sec_{name}"] = time.perf_counter() - t0
        rows.append(row)
    return rows


def _score_chunk(job: tuple[list[int], dict[str, Any]]) -> list[dict[str, Any]]:
    indices, kwargs = job
    return score_cells(indices, **kwargs)


def collect(indices: Sequence[int], proxies: Sequence[str], *, out: str, channels: int, cells_per_stage: int,
            batch: int, jobs: int) -> Any:
    """A frame of the proxies of ``indices`` (index order), from the cache where it has them, the rest computed in
    ``jobs`` processes and added to the cache."""
    import pandas as pd

    path = cache_path(out, channels, cells_per_stage, batch)
    cached = pd.read_csv(path).set_index("index") if path.exists() else pd.DataFrame()
    todo = [int(i) for i in indices
            if i not in cached.index or any(p not in cached or np.isnan(cached.at[i, p]) for p in proxies)]
    if todo:
        chunks = [todo[k:k + 25] for k in range(0, len(todo), 25)]
        kwargs = {"proxies": list(proxies), "channels": channels, "cells_per_stage": cells_per_stage, "batch": batch}
        rows = [r for part in pool_map(_score_chunk, [(c, kwargs) for c in chunks], jobs) for r in part]
        fresh = pd.DataFrame(rows).set_index("index")
        cached = fresh.combine_first(cached) if len(cached) else fresh
        make_export_dir(path.parent)
        cached.sort_index().reset_index().to_csv(path, index=False)
    return cached.loc[list(indices)]


@functools.lru_cache(maxsize=4)
def proxy_column(path: str, proxy: str) -> tuple[np.ndarray, float]:
    """A proxy's value for every NAS-Bench-201 index (NaN where the cache has none) and its mean seconds per cell,
    from a cache file (read once per process)."""
    import pandas as pd

    from nas.train.proxies import PROXIES

    if not Path(path).exists():
        raise ValueError(f"no proxy cache at {path}: run nas bench proxies --sample all --proxies {proxy} first")
    df = pd.read_csv(path)
    if proxy not in df or proxy not in PROXIES:
        raise ValueError(f"{path} has no column {proxy!r}: run nas bench proxies --sample all --proxies {proxy}")
    values = np.full(15_625, np.nan)
    values[df["index"].to_numpy()] = df[proxy].to_numpy(float)
    group = next(g for g, members in PASSES.items() if proxy in members)
    seconds = float(df[f"sec_{group}"].mean()) if f"sec_{group}" in df else 0.0
    return values, seconds


def correlations(frame: Any, proxies: Sequence[str]) -> dict[str, dict[str, tuple[float, float]]]:
    """proxy (and ``vote``) -> dataset -> (Spearman rho, Kendall tau) against the 200-epoch validation accuracy."""
    from scipy.stats import kendalltau, rankdata, spearmanr

    from nas.engine.tabular.nb201_table import load_table

    table = load_table()
    idx = frame.index.to_numpy()
    columns = {p: frame[p].to_numpy(float) for p in proxies}
    if all(p in columns for p in VOTE):
        columns["vote"] = np.mean([rankdata(np.nan_to_num(columns[p], nan=-np.inf)) for p in VOTE], axis=0)
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for name, values in columns.items():
        v = np.array(values, dtype=float)
        bad = ~np.isfinite(v)
        if bad.any():  # a cell that failed to score, or passes nothing through: ranks last
            v[bad] = (v[~bad].min() if (~bad).any() else 0.0) - 1.0
        truth = {d: table.valid200[d][idx] for d in DATASETS}
        out[name] = {d: (float(spearmanr(v, truth[d])[0]), float(kendalltau(v, truth[d])[0])) for d in DATASETS}
    return out


def format_table(corr: dict[str, dict[str, tuple[float, float]]], seconds: dict[str, float]) -> str:
    head = ["proxy", *[f"rho {d}" for d in DATASETS], *[f"tau {d}" for d in DATASETS], "s/cell", "published rho"]
    rows = [head]
    for name, by in corr.items():
        group = next((g for g, members in PASSES.items() if name in members), None)
        sec = f"{seconds[group]:.3f}" if group in seconds else "-"
        pub = ", ".join(f"{d} {v:.3f}" for d, v in PUBLISHED.get(name, {}).items())
        rows.append([name, *[f"{by[d][0]:.3f}" for d in DATASETS], *[f"{by[d][1]:.3f}" for d in DATASETS], sec, pub])
    return text_table(rows, rule=True)


def register(sub: argparse._SubParsersAction) -> None:
    p = add_experiment(sub, __doc__, cmd_proxies)
    p.add_argument("--sample", default="1000", help="cells sampled at random (default 1000), or 'all'")
    p.add_argument("--proxies", default=",".join(("synflow", "snip", "grad_norm", "jacob_cov", "naswot", "params")),
                   help="comma-separated (default: every proxy)")
    p.add_argument("--channels", type=int, default=16, help="stem channels of the network (default 16)")
    p.add_argument("--cells-per-stage", type=int, default=1, help="cells per stage (default 1; the paper's is 5)")
    p.add_argument("--batch", type=int, default=32, help="generated images in the minibatch (default 32)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sample of cells (default 0)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes (default: all cores)")
    p.add_argument("--out", default="bench-results", type=folder_arg,
                   help="directory of the cache (default bench-results)")
    p.add_argument("--json", type=file_arg, help="also write the figures to this JSON file")


def cmd_proxies(args: argparse.Namespace) -> int:
    from nas.train.proxies import check_names

    proxies = check_names(s.strip() for s in args.proxies.split(",") if s.strip())
    n = 15_625 if args.sample == "all" else int(args.sample) if str(args.sample).isdigit() else 0
    if not 2 <= n <= 15_625:
        raise ValueError(f"--sample must be 2..15625 or 'all', got {args.sample!r}")
    for flag in ("channels", "cells_per_stage", "batch", "jobs"):
        if getattr(args, flag) < 1:
            raise ValueError(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}")
    indices = sorted(np.random.default_rng(args.seed).choice(15_625, n, replace=False).tolist())
    t0 = time.perf_counter()
    frame = collect(indices, proxies, out=args.out, channels=args.channels, cells_per_stage=args.cells_per_stage,
                    batch=args.batch, jobs=args.jobs)
    seconds = {g: float(frame[f"sec_{g}"].mean()) for g in PASSES if f"sec_{g}" in frame}
    corr = correlations(frame, proxies)
    print(f"NAS-Bench-201: {n} cells (seed {args.seed}), NB201Space(channels={args.channels}, cells_per_stage="
          f"{args.cells_per_stage}) at initialisation, 32x32 inputs, {args.batch} generated CIFAR-shaped images; "
          "against the 200-epoch validation accuracy")
    print(format_table(corr, seconds))
    print(f"s/cell: one pass on this CPU, one torch thread, model built apart; {time.perf_counter() - t0:.1f} s in "
          f"all ({args.jobs} processes); cache {cache_path(args.out, args.channels, args.cells_per_stage, args.batch)}")
    write_json(args.json, {"cells": n, "correlations": corr, "seconds_per_cell": seconds})
    return 0
