"""``nas bench supernet``: a trained supernet's sub-networks against standalone training, and two-stage search.

Three parts, on the ``macro`` space and scikit-learn's 8x8 digits (or ``--dataset``), on the CPU, one thread:

(a) **Ranking.** Per seed: a supernet trained ``--supernet-epochs`` epochs by single-path one-shot training
(:func:`nas.oneshot.train_supernet`), then ``--archs`` architectures sampled (seeded), each evaluated with the
supernet's weights (:class:`nas.train.supernet_eval.SupernetEval`: batch norm recalibrated on ``--bn-batches``
batches) and trained standalone from scratch for ``--standalone-epochs`` epochs (the built-in training function),
by the same :class:`nas.train.runner.TrialRunner`. Kendall's tau and Spearman's rho (``scipy.stats``) between the
two accuracies, per seed, then mean and standard deviation over seeds. Also the seconds one sub-network's
evaluation takes (the training function alone, and the whole trial with its cost measurement) against one epoch
of standalone training of the same architectures.

(b) **Two-stage against multi-trial, at the same training compute.** Compute is counted in training epochs (one
epoch = the training set once through one network path). Two-stage: the supernet's ``--supernet-epochs``, then
regularized evolution over ``--evaluations`` sub-networks evaluated with its weights (no training). Multi-trial:
regularized evolution (same options) training ``--supernet-epochs / --trial-epochs`` trials of ``--trial-epochs``
epochs each. Each side's chosen architecture is then retrained standalone for ``--retrain-epochs`` (same seed,
same trainer) and its validation accuracy compared. Seconds are shown per stage; each ``nas.search``'s start-up
(its worker and data) is shown apart as ``setup`` on both sides.

(c) **Scale.** ``--many`` sub-networks (default 1,000) of the first seed's supernet searched by regularized
evolution for two objectives (``val_acc``, ``latency_ms:min``, every candidate's latency and FLOPs measured) on
the in-process executor: wall seconds, seconds per sub-network, the Pareto front's size.

Accuracies are measured, never asserted.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy import stats

import nas.api
from nas.cli.common import file_arg
from nas.core.types import Trial
from nas.oneshot import train_supernet
from nas.search_spaces.macro import MacroSpace
from nas.train.data import Dataset, load_dataset
from nas.train.runner import TrialRunner
from nas.train.settings import TrainSettings
from nas.train.supernet_eval import SupernetEval

from . import add_experiment
from .harness import QUICK_WINS, apply_quick, at_least, text_table, write_json

EVOLUTION = {"population": 20, "sample_size": 5}


def ranking(data: Dataset, settings: TrainSettings, work: Path, *, seed: int, archs: int, supernet_epochs: int,
            standalone_epochs: int, bn_batches: int, sampling: str) -> dict[str, Any]:
    """Part (a) for one seed: inherited and standalone accuracy of ``archs`` sampled architectures."""
    space, rng = MacroSpace(), np.random.default_rng(seed)
    sn = work / f"supernet-{seed}"
    epochs = train_supernet(space, data, sn, epochs=supernet_epochs, sampling=sampling, seed=seed,
                            settings=settings, progress=False, executor="inprocess")
    evaluate = TrialRunner(data, settings, train=SupernetEval(sn, bn_batches=bn_batches))
    standalone = TrialRunner(data, settings)
    rows = []
    for i in range(archs):
        arch = space.sample(rng)
        inherited, _ = evaluate.run(Trial(i, arch), space, None, keep=False)
        alone, _ = standalone.run(Trial(i, arch, epochs=standalone_epochs), space, None, keep=False)
        for r in (inherited, alone):
            if not r.ok:
                raise RuntimeError(f"{space.format(arch)} failed: {r.error}")
        rows.append({"arch": space.format(arch), "inherited": float(inherited.score or 0.0),
                     "standalone": float(alone.score or 0.0),
                     "eval_seconds": float(inherited.metrics["eval_seconds"]),
                     "trial_seconds": float((inherited.end_time or 0.0) - (inherited.start_time or 0.0)),  # + costs
                     "epoch_seconds": float(alone.metrics["train_seconds"]) / standalone_epochs})
    inh, std = [r["inherited"] for r in rows], [r["standalone"] for r in rows]
    return {"seed": seed, "kendall": float(stats.kendalltau(inh, std).statistic),
            "spearman": float(stats.spearmanr(inh, std).statistic), "archs": rows,
            "supernet_seconds": float(epochs["seconds"].sum()), "supernet_dir": str(sn)}


def _search(data: Dataset, settings: TrainSettings, run_dir: Path, *, seed: int, budget: int,
            supernet: Path | None = None, objectives: tuple[str, ...] = ("val_acc",)) -> tuple[Any, float, float]:
    """One regularized-evolution search on the in-process executor: its results, wall seconds and the seconds its
    trials took (the rest is start-up: the worker, the data on it)."""
    t0 = time.perf_counter()
    df = nas.api.search(MacroSpace(), "evolution", budget=budget, executor="inprocess", data=data, seed=seed,
                        settings=settings, supernet=supernet, run_dir=run_dir, objectives=list(objectives),
                        strategy_options={"population": min(EVOLUTION["population"], budget),
                                          "sample_size": min(EVOLUTION["sample_size"], budget)})
    wall = time.perf_counter() - t0
    return df, wall, float((df["end_time"] - df["start_time"]).sum())


def two_stage(data: Dataset, settings: TrainSettings, work: Path, *, seed: int, supernet_dir: Path,
              supernet_seconds: float, supernet_epochs: int, evaluations: int, trial_epochs: int,
              retrain_epochs: int) -> dict[str, Any]:
    """Part (b) for one seed (the supernet of part (a) for this seed is stage one)."""
    quiet = dataclasses.replace(settings, measure_costs=False)
    found, wall, trials = _search(data, quiet, work / f"two-stage-{seed}", seed=seed, budget=evaluations,
                                  supernet=supernet_dir)
    multi, m_wall, m_trials = _search(data, dataclasses.replace(quiet, epochs=trial_epochs),
                                      work / f"multi-trial-{seed}", seed=seed,
                                      budget=max(1, supernet_epochs // trial_epochs))
    retrain = TrialRunner(data, dataclasses.replace(quiet, epochs=retrain_epochs))
    space = MacroSpace()
    out: dict[str, Any] = {"seed": seed}
    for side, df, stage2, setup in (("two-stage", found, trials, wall - trials),
                                    ("multi-trial", multi, m_trials, m_wall - m_trials)):
        best = df.sort_values("score", ascending=False, kind="stable").iloc[0]
        arch = space.parse(best["arch"])
        result, _ = retrain.run(Trial(0, arch), space, None, keep=False)
        out[side] = {"arch": best["arch"], "search_score": float(best["score"]), "retrained": float(result.score or 0),
                     "trials": len(df), "search_seconds": stage2, "setup_seconds": setup,
                     "training_epochs": supernet_epochs if side == "two-stage" else len(df) * trial_epochs,
                     "supernet_seconds": supernet_seconds if side == "two-stage" else 0.0}
    return out


def many(data: Dataset, settings: TrainSettings, work: Path, *, supernet_dir: Path, n: int) -> dict[str, Any]:
    """Part (c): ``n`` sub-networks searched for accuracy and latency."""
    df, wall, trials = _search(data, settings, work / "many", seed=0, budget=n, supernet=supernet_dir,
                               objectives=("val_acc", "latency_ms:min"))
    return {"subnetworks": len(df), "complete": int((df["state"] == "COMPLETE").sum()), "wall_seconds": wall,
            "trial_seconds": trials, "front": len(df.attrs["front"]),
            "eval_seconds": float(df["metrics"].map(lambda m: m.get("eval_seconds", 0.0)).mean())}


def _mean_sd(values: list[float]) -> str:
    return f"{statistics.fmean(values):.3f} ± {statistics.stdev(values) if len(values) > 1 else 0.0:.3f}"


def handler(args: argparse.Namespace) -> int:
    at_least(1, seeds=args.seeds, supernet_epochs=args.supernet_epochs, standalone_epochs=args.standalone_epochs,
             evaluations=args.evaluations, trial_epochs=args.trial_epochs, retrain_epochs=args.retrain_epochs,
             many=args.many)
    at_least(3, archs=args.archs)
    at_least(0, bn_batches=args.bn_batches)
    apply_quick(args, seeds=2, archs=4, supernet_epochs=2, standalone_epochs=1,  # (after the checks)
                evaluations=6, trial_epochs=1, retrain_epochs=1, many=10)
    torch.set_num_threads(1)
    data = load_dataset(args.dataset, seed=0)
    settings = TrainSettings(device="cpu", threads=1, lr=args.lr, batch_size=args.batch_size, schedule="cosine")
    print(f"nas bench supernet: macro space on {data.name} ({len(data.x_train):,} train, {len(data.x_val):,} val); "
          f"supernet {args.supernet_epochs} epochs ({args.sampling}); {args.archs} architectures per seed, "
          f"standalone {args.standalone_epochs} epochs; {args.seeds} seeds; adam lr {args.lr:g} cosine, batch "
          f"{args.batch_size}; torch {torch.__version__}, 1 thread", flush=True)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="nas-bench-supernet-") as tmp:
        work = Path(tmp)
        ranks = [ranking(data, settings, work, seed=s, archs=args.archs, supernet_epochs=args.supernet_epochs,
                         standalone_epochs=args.standalone_epochs, bn_batches=args.bn_batches,
                         sampling=args.sampling) for s in range(args.seeds)]
        print_ranking(ranks)
        duels = [two_stage(data, settings, work, seed=r["seed"], supernet_dir=Path(r["supernet_dir"]),
                           supernet_seconds=r["supernet_seconds"], supernet_epochs=args.supernet_epochs,
                           evaluations=args.evaluations, trial_epochs=args.trial_epochs,
                           retrain_epochs=args.retrain_epochs) for r in ranks]
        print_duels(duels, args)
        scale = many(data, settings, work, supernet_dir=Path(ranks[0]["supernet_dir"]), n=args.many)
    print(f"(c) {scale['subnetworks']:,} sub-networks searched (evolution, val_acc and latency_ms:min, costs measured "
          f"per candidate; in-process, 1 thread): {scale['wall_seconds']:.1f} s wall, "
          f"{scale['wall_seconds'] / scale['subnetworks'] * 1000:.0f} ms per sub-network "
          f"({scale['eval_seconds'] * 1000:.0f} ms of it evaluating); {scale['complete']} complete, Pareto front of "
          f"{scale['front']}")
    print(f"{time.perf_counter() - t0:.0f} s in all")
    write_json(args.json, {"args": {k: v for k, v in vars(args).items() if k != "handler"}, "ranking": ranks,
                           "two_stage": duels, "many": scale})
    return 0


def print_ranking(ranks: list[dict[str, Any]]) -> None:
    table = [["seed", "Kendall tau", "Spearman rho", "inherited acc", "standalone acc", "eval s", "trial s",
              "epoch s", "eval / epoch"]]
    for r in ranks:
        rows = r["archs"]
        mean = {k: statistics.fmean(a[k] for a in rows) for k in rows[0] if k != "arch"}
        table.append([str(r["seed"]), f"{r['kendall']:.3f}", f"{r['spearman']:.3f}", f"{mean['inherited']:.3f}",
                      f"{mean['standalone']:.3f}", f"{mean['eval_seconds']:.3f}", f"{mean['trial_seconds']:.3f}",
                      f"{mean['epoch_seconds']:.3f}", f"{mean['eval_seconds'] / mean['epoch_seconds']:.2f}"])
    print("(a) rank correlation of supernet-inherited and standalone-trained validation accuracy")
    print(text_table(table, rule=True))
    print(f"    over seeds: Kendall tau {_mean_sd([r['kendall'] for r in ranks])}, Spearman rho "
          f"{_mean_sd([r['spearman'] for r in ranks])} (mean ± sd); eval s: one sub-network's evaluation "
          "(weights cut, BN recalibrated, validated); trial s: the same with its cost measurement; epoch s: one "
          "standalone training epoch (means over the architectures)", flush=True)


def print_duels(duels: list[dict[str, Any]], args: argparse.Namespace) -> None:
    table = [["side", "training epochs", "trials", "supernet s", "search s", "setup s", "search acc",
              "retrained acc"]]
    for side in ("two-stage", "multi-trial"):
        rows = [d[side] for d in duels]
        table.append([side, f"{rows[0]['training_epochs']}", f"{rows[0]['trials']}",
                      f"{statistics.fmean(r['supernet_seconds'] for r in rows):.1f}",
                      f"{statistics.fmean(r['search_seconds'] for r in rows):.1f}",
                      f"{statistics.fmean(r['setup_seconds'] for r in rows):.1f}",
                      _mean_sd([r["search_score"] for r in rows]), _mean_sd([r["retrained"] for r in rows])])
    print(f"(b) two-stage against multi-trial search at {args.supernet_epochs} training epochs each (means over "
          f"{len(duels)} seeds; the chosen architecture retrained {args.retrain_epochs} epochs standalone)")
    print(text_table(table, rule=True))


def register(sub: argparse._SubParsersAction) -> None:
    p = add_experiment(sub, __doc__, handler)
    p.add_argument("--dataset", default="digits", help="digits (default), synthetic, or a .npz file")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--archs", type=int, default=16, help="architectures per seed for the ranking (default 16)")
    p.add_argument("--supernet-epochs", type=int, default=30, help="SPOS epochs (default 30)")
    p.add_argument("--sampling", choices=["uniform", "fair", "sandwich"], default="uniform")
    p.add_argument("--standalone-epochs", type=int, default=6, help="standalone training per architecture (6)")
    p.add_argument("--bn-batches", type=int, default=4, help="batches batch norm is recalibrated on (4)")
    p.add_argument("--evaluations", type=int, default=200, help="sub-networks the two-stage search evaluates")
    p.add_argument("--trial-epochs", type=int, default=3, help="epochs per multi-trial trial (3)")
    p.add_argument("--retrain-epochs", type=int, default=10, help="standalone retraining of each chosen one (10)")
    p.add_argument("--many", type=int, default=1000, help="sub-networks searched in part (c) (1,000)")
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--quick", action="store_true",
                   help="2 seeds, 4 architectures, 2 supernet epochs, 10 in (c)" + QUICK_WINS)
    p.add_argument("--json", metavar="FILE", type=file_arg, help="also write the figures as JSON")
